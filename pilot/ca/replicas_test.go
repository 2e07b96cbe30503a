package ca

import (
	"crypto/ed25519"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/weft-mesh/weft/certs/csrrpc"
	"github.com/weft-mesh/weft/internal/edkey"
	"github.com/weft-mesh/weft/tools/testkit/certfiles"
)

// TestReplicasShareKeys: two pilot replicas (their own data directories) with
// the same plugged-in root, token key file and publisher key file: a bootstrap
// token minted by one enrolls at the other, a certificate one issued verifies
// against the other's bundle, and both publish under the one key.
func TestReplicasShareKeys(t *testing.T) {
	root := certfiles.NewCA(t, "cluster.local")
	keys := t.TempDir()
	tokenKey, publisherKey := filepath.Join(keys, "token.key"), filepath.Join(keys, "publisher.key")
	for _, f := range []string{tokenKey, publisherKey} {
		if _, _, err := edkey.LoadOrCreate(f, "test key"); err != nil {
			t.Fatal(err)
		}
	}
	shared := func(c *ServiceConfig) {
		c.RootCertFile, c.RootKeyFile = root.RootCertFile, root.RootKeyFile
		c.TokenKeyFile, c.PublisherKeyFile = tokenKey, publisherKey
	}
	a, b := newService(t, t.TempDir(), shared), newService(t, t.TempDir(), shared)
	tok, _, err := a.IssueToken("shop", "reviews", time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	w := newWorkload(t)
	chain, err := csrrpc.Sign(ctx(t), dial(t, b, serveTLS(t, b), nil, nil), w.csr(t, reviews), tok)
	if err != nil {
		t.Fatalf("token of replica a at replica b: %v", err)
	}
	if id, err := a.Bundle().Verify(chain, time.Now()); err != nil || id.String() != reviews {
		t.Fatalf("b's certificate against a's bundle: %v %v", id, err)
	}
	pa, _ := a.Publisher()
	pb, _ := b.Publisher()
	if !pa.Equal(pb) {
		t.Fatal("replicas publish under different keys")
	}
	want, _ := edkey.Load(publisherKey, "publisher key")
	if !pa.Public().(ed25519.PublicKey).Equal(want.Public()) {
		t.Fatal("publisher key is not the shared file's")
	}
	// A replica without the shared token key refuses a's token.
	c := newService(t, t.TempDir(), func(c *ServiceConfig) { c.RootCertFile, c.RootKeyFile = root.RootCertFile, root.RootKeyFile })
	if _, err := csrrpc.Sign(ctx(t), dial(t, c, serveTLS(t, c), nil, nil), w.csr(t, reviews), tok); err == nil {
		t.Fatal("a replica with its own token key accepted another's token")
	}
	// A missing shared file is an error naming it, never a fresh key.
	_, err = New(ServiceConfig{DataDir: t.TempDir(), TokenKeyFile: filepath.Join(keys, "missing.key"), Logger: a.log})
	if err == nil || !strings.Contains(err.Error(), "missing.key") {
		t.Fatalf("missing token key file: %v", err)
	}
}
