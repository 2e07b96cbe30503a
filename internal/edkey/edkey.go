// Package edkey keeps an Ed25519 private key in a PEM file (PKCS#8, 0600),
// made on first use: pilot's publisher key and its bootstrap-token key.
package edkey

import (
	"crypto/ed25519"
	"crypto/rand"
	"crypto/x509"
	"encoding/pem"
	"errors"
	"fmt"
	"io/fs"
	"os"

	"github.com/weft-mesh/weft/internal/atomicfile"
)

// LoadOrCreate returns the Ed25519 key in the PEM PRIVATE KEY file at path, or
// makes one and writes it there atomically (0600) when the file does not exist;
// created says which. Errors start with what (e.g. "token key").
func LoadOrCreate(path, what string) (key ed25519.PrivateKey, created bool, err error) {
	b, err := os.ReadFile(path)
	switch {
	case err == nil:
		key, err := parse(path, what, b)
		return key, false, err
	case !errors.Is(err, fs.ErrNotExist):
		return nil, false, fmt.Errorf("%s: %w", what, err)
	}
	_, priv, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		return nil, false, fmt.Errorf("%s: generate: %w", what, err)
	}
	der, err := x509.MarshalPKCS8PrivateKey(priv)
	if err != nil {
		return nil, false, fmt.Errorf("%s: %w", what, err)
	}
	if err := atomicfile.Write(path, pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: der}), 0o600); err != nil {
		return nil, false, fmt.Errorf("%s: %w", what, err)
	}
	return priv, true, nil
}

// Load reads an existing key file (one several pilot replicas share): unlike
// LoadOrCreate, a missing file is an error.
func Load(path, what string) (ed25519.PrivateKey, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", what, err)
	}
	return parse(path, what, b)
}

func parse(path, what string, b []byte) (ed25519.PrivateKey, error) {
	blk, _ := pem.Decode(b)
	if blk == nil || blk.Type != "PRIVATE KEY" {
		return nil, fmt.Errorf("%s %s: not a PEM PRIVATE KEY", what, path)
	}
	k, err := x509.ParsePKCS8PrivateKey(blk.Bytes)
	if err != nil {
		return nil, fmt.Errorf("%s %s: %w", what, path, err)
	}
	priv, ok := k.(ed25519.PrivateKey)
	if !ok {
		return nil, fmt.Errorf("%s %s: %T, want Ed25519", what, path, k)
	}
	return priv, nil
}
