package manifest

import (
	"crypto/ed25519"
	"crypto/rand"
	"crypto/x509"
	"encoding/pem"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"

	"github.com/weft-mesh/weft/internal/atomicfile"
)

// File names pilot keeps in its data directory.
const (
	PrivateKeyFile = "publisher.key"
	PublicKeyFile  = "publisher.pub"
)

// LoadOrCreateKey returns pilot's publisher key from dir, creating it (private half
// 0600, public half 0644, both written atomically) on first start.
func LoadOrCreateKey(dir string) (ed25519.PrivateKey, error) {
	path := filepath.Join(dir, PrivateKeyFile)
	b, err := os.ReadFile(path)
	switch {
	case err == nil:
		return parsePrivate(path, b)
	case !errors.Is(err, fs.ErrNotExist):
		return nil, fmt.Errorf("publisher key: %w", err)
	}
	pub, priv, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		return nil, fmt.Errorf("publisher key: generate: %w", err)
	}
	der, err := x509.MarshalPKCS8PrivateKey(priv)
	if err != nil {
		return nil, fmt.Errorf("publisher key: %w", err)
	}
	if err := atomicfile.Write(path, pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: der}), 0o600); err != nil {
		return nil, err
	}
	if err := WritePublicKey(filepath.Join(dir, PublicKeyFile), pub); err != nil {
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

func parsePrivate(path string, b []byte) (ed25519.PrivateKey, error) {
	blk, _ := pem.Decode(b)
	if blk == nil || blk.Type != "PRIVATE KEY" {
		return nil, fmt.Errorf("publisher key %s: not a PEM PRIVATE KEY", path)
	}
	k, err := x509.ParsePKCS8PrivateKey(blk.Bytes)
	if err != nil {
		return nil, fmt.Errorf("publisher key %s: %w", path, err)
	}
	priv, ok := k.(ed25519.PrivateKey)
	if !ok {
		return nil, fmt.Errorf("publisher key %s: not Ed25519", path)
	}
	return priv, nil
}
