package lkg

import (
	"crypto/ed25519"
	"crypto/rand"
	"crypto/x509"
	"errors"
	"math/big"
	"strings"
	"testing"
	"time"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	tlsv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/transport_sockets/tls/v3"
	"google.golang.org/protobuf/proto"

	"github.com/weft-mesh/weft/certs/ca"
	"github.com/weft-mesh/weft/certs/manifest"
	"github.com/weft-mesh/weft/certs/manifest/manifestpb"
	"github.com/weft-mesh/weft/certs/revoke"
	"github.com/weft-mesh/weft/certs/spiffe"
)

const td = "cluster.local"

// secret is a ROOTCA Secret's Any.value carrying a bundle and a CRL (PEM).
func secret(t testing.TB, pem, crl []byte) []byte {
	t.Helper()
	vc := &tlsv3.CertificateValidationContext{TrustedCa: &corev3.DataSource{Specifier: &corev3.DataSource_InlineBytes{InlineBytes: pem}}}
	if crl != nil {
		vc.Crl = &corev3.DataSource{Specifier: &corev3.DataSource_InlineBytes{InlineBytes: crl}}
	}
	b, err := proto.MarshalOptions{Deterministic: true}.Marshal(&tlsv3.Secret{Name: manifest.RootCAName,
		Type: &tlsv3.Secret_ValidationContext{ValidationContext: vc}})
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// crlOf is a CRL (PEM) from c's current signer listing revoked.
func crlOf(t testing.TB, c *ca.CA, revoked ...*big.Int) []byte {
	t.Helper()
	issuer, key := c.CRLSigner()
	var es []revoke.Entry
	for _, s := range revoked {
		es = append(es, revoke.Entry{Serial: s, RevokedAt: time.Now()})
	}
	der, err := revoke.Build(issuer, key, 1, es, time.Now().Add(-time.Minute), time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	return revoke.PEM(der)
}

// secretOf is the ROOTCA pilot sends for c now: its bundle and a CRL.
func secretOf(t testing.TB, c *ca.CA) []byte { return secret(t, c.Bundle().PEM(), crlOf(t, c)) }

// publisher is a key with a publisher certificate from c's current signer.
type publisher struct {
	key   ed25519.PrivateKey
	chain []*x509.Certificate
}

func newPublisher(t testing.TB, c *ca.CA) publisher {
	t.Helper()
	_, key, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	id, err := spiffe.Publisher(td)
	if err != nil {
		t.Fatal(err)
	}
	chain, err := c.SignKey(key.Public(), id, nil, nil, time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	return publisher{key: key, chain: chain}
}

// sign signs a manifest for node "n" whose snapshot is a cluster and, when
// secret is not nil, the ROOTCA Secret; it returns the manifest and resources.
func (p publisher) sign(t testing.TB, secret []byte, issued time.Time) (*manifestpb.SignedManifest, []Resource) {
	t.Helper()
	res := []Resource{{TypeURL: "t/cluster", Name: "c", Value: []byte("cluster")}}
	if secret != nil {
		res = append(res, Resource{TypeURL: manifest.SecretTypeURL, Name: manifest.RootCAName, Value: secret})
	}
	var entries []manifest.Entry
	for _, r := range res {
		entries = append(entries, manifest.Entry{TypeURL: r.TypeURL, Name: r.Name, SHA256: manifest.Hash(r.Value)})
	}
	d, err := manifest.Digest(entries)
	if err != nil {
		t.Fatal(err)
	}
	content := manifest.Content{Scope: "s", Revision: 1, Digest: d, Count: len(entries), IssuedAt: issued, ValidUntil: issued.Add(24 * time.Hour)}
	if secret != nil {
		content.RootCA, content.HasRootCA = manifest.Hash(secret), true
	}
	c, err := manifest.SignContent(p.key, content)
	if err != nil {
		t.Fatal(err)
	}
	b, err := manifest.SignBinding(p.key, manifest.Binding{NodeID: "n", Scope: "s", IssuedAt: issued, ValidUntil: issued.Add(24 * time.Hour), Current: true})
	if err != nil {
		t.Fatal(err)
	}
	sm, err := manifest.Assemble(c, b, p.chain...)
	if err != nil {
		t.Fatal(err)
	}
	return sm, res
}

// rotations rotates c's root n times; each rotation's overlap bundle is
// delivered by a publisher under the old root: the path from the first root.
func rotations(t testing.TB, c *ca.CA, n int) []Endorsement {
	t.Helper()
	var path []Endorsement
	for range n {
		old := newPublisher(t, c)
		if err := c.StartRotation(); err != nil {
			t.Fatal(err)
		}
		secret := secretOf(t, c)
		sm, _ := old.sign(t, secret, time.Now())
		path = append(path, Endorsement{Manifest: sm, RootCA: secret})
		if err := c.FinishRotation(); err != nil {
			t.Fatal(err)
		}
	}
	return path
}

func openCA(t testing.TB) (*ca.CA, manifest.Trust) {
	t.Helper()
	c, err := ca.Open(ca.Config{Dir: t.TempDir(), TrustDomain: td})
	if err != nil {
		t.Fatal(err)
	}
	return c, manifest.Trust{Roots: c.Bundle(), TrustDomain: td}
}

// TestRootRotationPath: after a rotation, a manifest signed under the new root
// verifies only through the endorsement of the overlap bundle, delivered under
// the old root; the path is persisted and followed again on load.
func TestRootRotationPath(t *testing.T) {
	c, base := openCA(t) // base: the sidecar's --ca-root, the first root
	path := rotations(t, c, 1)
	pub := newPublisher(t, c) // under the new root
	final := secretOf(t, c)
	sm, res := pub.sign(t, final, time.Now())
	now := time.Now()

	if _, err := base.VerifyStored(sm, "n", now); !errors.Is(err, manifest.ErrChain) {
		t.Fatalf("under --ca-root alone: %v, want %v", err, manifest.ErrChain)
	}
	end, err := Follow(base, path, "n", now)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := end.VerifyStored(sm, "n", now); err != nil {
		t.Fatalf("through the path: %v", err)
	}
	short, err := Shortest(base, path, sm, "n", now)
	if err != nil || len(short) != 1 {
		t.Fatalf("Shortest = %d endorsements, %v; want 1", len(short), err)
	}

	dir := t.TempDir()
	if err := Save(dir, &Snapshot{NodeID: "n", Resources: res, Manifest: sm, LastConfirmed: now, Trust: short}); err != nil {
		t.Fatal(err)
	}
	got, m, err := Load(dir, base, "n", now)
	if err != nil {
		t.Fatal(err)
	}
	if len(got.Trust) != 1 || m.Publisher == nil || !m.HasRootCA {
		t.Fatalf("loaded path %d, manifest %+v", len(got.Trust), m)
	}
	// Without its path the same file is refused: the file cannot vouch for itself.
	if err := Save(dir, &Snapshot{NodeID: "n", Resources: res, Manifest: sm, LastConfirmed: now}); err != nil {
		t.Fatal(err)
	}
	if _, _, err := Load(dir, base, "n", now); !errors.Is(err, manifest.ErrChain) {
		t.Fatalf("load without the path: %v", err)
	}

	// A manifest signed under --ca-root's root needs no path.
	c2, base2 := openCA(t)
	sm2, _ := newPublisher(t, c2).sign(t, secretOf(t, c2), now)
	if short, err := Shortest(base2, path, sm2, "n", now); err != nil || len(short) != 0 {
		t.Fatalf("Shortest under --ca-root, before the path: %d, %v", len(short), err)
	}
	if short, err := Shortest(base2, nil, sm2, "n", now); err != nil || len(short) != 0 {
		t.Fatalf("Shortest under --ca-root: %d, %v", len(short), err)
	}
}

// TestSelfVouchingRefused: a snapshot whose ROOTCA holds a root of its own, with
// a manifest signed under it, is refused with or without a path naming it.
func TestSelfVouchingRefused(t *testing.T) {
	_, base := openCA(t)
	evil, _ := openCA(t)
	pub := newPublisher(t, evil)
	secret := secretOf(t, evil)
	sm, _ := pub.sign(t, secret, time.Now())
	if _, err := Follow(base, []Endorsement{{Manifest: sm, RootCA: secret}}, "n", time.Now()); !errors.Is(err, ErrTrustPath) || !errors.Is(err, manifest.ErrChain) {
		t.Fatalf("self-endorsed path: %v", err)
	}
	if _, err := Shortest(base, nil, sm, "n", time.Now()); !errors.Is(err, ErrTrustPath) {
		t.Fatalf("Shortest: %v", err)
	}
	// Nor is the trust of such a file kept (LoadTrust), with or without the path.
	_, res := pub.sign(t, secret, time.Now())
	for _, path := range [][]Endorsement{nil, {{Manifest: sm, RootCA: secret}}} {
		dir := t.TempDir()
		if err := Save(dir, &Snapshot{NodeID: "n", Resources: res, Manifest: sm, Trust: path}); err != nil {
			t.Fatal(err)
		}
		if _, _, err := LoadTrust(dir, base, "n", time.Now()); !errors.Is(err, ErrTrustPath) {
			t.Fatalf("LoadTrust of a self-vouching file (path %d): %v", len(path), err)
		}
	}
}

// TestEndorsementMustCommit: an endorsement's manifest must commit to its
// bundle's hash (a trusted manifest beside another bundle proves nothing).
func TestEndorsementMustCommit(t *testing.T) {
	c, base := openCA(t)
	old := newPublisher(t, c)
	if err := c.StartRotation(); err != nil {
		t.Fatal(err)
	}
	overlap := secretOf(t, c)
	sm, _ := old.sign(t, secret(t, base.Roots.PEM(), crlOf(t, c)), time.Now()) // commits to another bundle
	if _, err := Follow(base, []Endorsement{{Manifest: sm, RootCA: overlap}}, "n", time.Now()); !errors.Is(err, ErrTrustPath) || !strings.Contains(err.Error(), "does not commit") {
		t.Fatalf("uncommitted bundle: %v", err)
	}
	none, _ := old.sign(t, nil, time.Now()) // commits to no bundle
	if _, err := Follow(base, []Endorsement{{Manifest: none, RootCA: overlap}}, "n", time.Now()); !errors.Is(err, ErrTrustPath) {
		t.Fatalf("manifest without a bundle: %v", err)
	}
}

// TestMaxPath: MaxPath rotations since --ca-root are followed; one more is
// refused, naming the bound and the remedy.
func TestMaxPath(t *testing.T) {
	c, base := openCA(t)
	path := rotations(t, c, MaxPath+1)
	now := time.Now()
	if _, err := Follow(base, path[:MaxPath], "n", now); err != nil {
		t.Fatalf("%d endorsements: %v", MaxPath, err)
	}
	if _, err := Follow(base, path, "n", now); !errors.Is(err, ErrTrustPath) || !strings.Contains(err.Error(), "limit 8: update --ca-root") {
		t.Fatalf("%d endorsements: %v", MaxPath+1, err)
	}
	sm, res := newPublisher(t, c).sign(t, secretOf(t, c), now)
	if _, err := Shortest(base, path, sm, "n", now); !errors.Is(err, ErrTrustPath) || !strings.Contains(err.Error(), "limit 8") {
		t.Fatalf("Shortest past the bound: %v", err)
	}
	if err := Save(t.TempDir(), &Snapshot{NodeID: "n", Resources: res, Manifest: sm, Trust: path}); err == nil {
		t.Fatal("saved a path past the bound")
	}
}

func TestRootBundle(t *testing.T) {
	c, _ := openCA(t)
	good := secretOf(t, c)
	b, err := RootBundle(good)
	if err != nil || !b.Equal(c.Bundle()) {
		t.Fatalf("RootBundle = %v, %v", b, err)
	}
	other, _ := proto.Marshal(&tlsv3.Secret{Name: "default"})
	noVC, _ := proto.Marshal(&tlsv3.Secret{Name: manifest.RootCAName})
	noCA, _ := proto.Marshal(&tlsv3.Secret{Name: manifest.RootCAName, Type: &tlsv3.Secret_ValidationContext{ValidationContext: &tlsv3.CertificateValidationContext{}}})
	for _, tc := range []struct {
		name  string
		value []byte
		want  string
	}{
		{"not protobuf", []byte{0xff}, "malformed protobuf"},
		{"another secret", other, `secret "default": name: want ROOTCA`},
		{"no validation context", noVC, "validation_context: required"},
		{"no trusted CA", noCA, "validation_context.trusted_ca.inline_bytes: required"},
		{"not PEM", secret(t, []byte("junk"), nil), "validation_context.trusted_ca: "},
	} {
		if _, err := RootBundle(tc.value); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: %v, want %q", tc.name, err, tc.want)
		}
	}
	// RootCA also reads the CRL, which a root of the bundle must have signed.
	if _, crl, err := RootCA(secret(t, c.Bundle().PEM(), nil)); err == nil || !strings.Contains(err.Error(), "validation_context.crl.inline_bytes: required") {
		t.Fatalf("a ROOTCA without a CRL: %v %v", crl, err)
	}
	if _, crl, err := RootCA(secretOf(t, c)); err != nil || crl == nil {
		t.Fatalf("RootCA = %v, %v", crl, err)
	}
	otherCA, _ := openCA(t)
	if _, _, err := RootCA(secret(t, c.Bundle().PEM(), crlOf(t, otherCA))); err == nil || !strings.Contains(err.Error(), "validation_context.crl: ") {
		t.Fatalf("a CRL from another CA: %v", err)
	}
}
