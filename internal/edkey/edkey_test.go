package edkey

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"encoding/pem"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func TestLoadOrCreate(t *testing.T) {
	path := filepath.Join(t.TempDir(), "k.pem")
	k1, created, err := LoadOrCreate(path, "test key")
	if err != nil || !created {
		t.Fatalf("first use: created %v, %v", created, err)
	}
	if fi, err := os.Stat(path); err != nil || fi.Mode().Perm() != 0o600 {
		t.Fatalf("key file: %v %v, want 0600", fi.Mode(), err)
	}
	k2, created, err := LoadOrCreate(path, "test key")
	if err != nil || created || !k1.Equal(k2) {
		t.Fatalf("second use: created %v, same key %v, %v", created, k1.Equal(k2), err)
	}
}

func TestLoadOrCreateRefuses(t *testing.T) {
	dir := t.TempDir()
	ec, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	ecDER, err := x509.MarshalPKCS8PrivateKey(ec)
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name    string
		content []byte
		err     string
	}{
		{"not PEM", []byte("junk"), "test key " + filepath.Join(dir, "not PEM") + ": not a PEM PRIVATE KEY"},
		{"other block", pem.EncodeToMemory(&pem.Block{Type: "PUBLIC KEY", Bytes: []byte{1}}), ": not a PEM PRIVATE KEY"},
		{"bad PKCS8", pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: []byte{1}}), "test key " + filepath.Join(dir, "bad PKCS8") + ": asn1"},
		{"ECDSA", pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: ecDER}), ": *ecdsa.PrivateKey, want Ed25519"},
	} {
		path := filepath.Join(dir, tc.name)
		if err := os.WriteFile(path, tc.content, 0o600); err != nil {
			t.Fatal(err)
		}
		if _, _, err := LoadOrCreate(path, "test key"); err == nil || !strings.Contains(err.Error(), tc.err) {
			t.Errorf("%s: %v, want %q", tc.name, err, tc.err)
		}
		if b, _ := os.ReadFile(path); string(b) != string(tc.content) {
			t.Errorf("%s: the refused file was rewritten", tc.name)
		}
	}
	// A path that cannot be read (a directory) is an error, not a new key.
	if _, _, err := LoadOrCreate(dir, "test key"); err == nil || !strings.HasPrefix(err.Error(), "test key: ") {
		t.Errorf("directory as key file: %v", err)
	}
}
