package manifest

import (
	"crypto/ed25519"
	"crypto/x509"
	"encoding/pem"
	"fmt"
	"os"
	"path/filepath"

	"github.com/weft-mesh/weft/internal/atomicfile"
	"github.com/weft-mesh/weft/internal/edkey"
)

// File names pilot keeps in its data directory.
const (
	PrivateKeyFile = "publisher.key"
	PublicKeyFile  = "publisher.pub"
)

// LoadOrCreateKey returns pilot's publisher key from dir, creating it (private half
// 0600, public half 0644, both written atomically) on first start.
func LoadOrCreateKey(dir string) (ed25519.PrivateKey, error) {
	priv, created, err := edkey.LoadOrCreate(filepath.Join(dir, PrivateKeyFile), "publisher key")
	if err != nil || !created {
		return priv, err
	}
	if err := WritePublicKey(filepath.Join(dir, PublicKeyFile), priv.Public().(ed25519.PublicKey)); err != nil {
		return nil, err
	}
	return priv, nil
}

// WritePublicKey writes pub as a PEM "PUBLIC KEY" file, atomically.
func WritePublicKey(path string, pub ed25519.PublicKey) error {
	der, err := x509.MarshalPKIXPublicKey(pub)
	if err != nil {
		return fmt.Errorf("publisher public key: %w", err)
	}
	return atomicfile.Write(path, pem.EncodeToMemory(&pem.Block{Type: "PUBLIC KEY", Bytes: der}), 0o644)
}

// LoadPublicKey reads the publisher public key a sidecar trusts.
func LoadPublicKey(path string) (ed25519.PublicKey, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("publisher public key: %w", err)
	}
	blk, _ := pem.Decode(b)
	if blk == nil || blk.Type != "PUBLIC KEY" {
		return nil, fmt.Errorf("publisher public key %s: not a PEM PUBLIC KEY", path)
	}
	k, err := x509.ParsePKIXPublicKey(blk.Bytes)
	if err != nil {
		return nil, fmt.Errorf("publisher public key %s: %w", path, err)
	}
	pub, ok := k.(ed25519.PublicKey)
	if !ok {
		return nil, fmt.Errorf("publisher public key %s: not Ed25519", path)
	}
	return pub, nil
}
