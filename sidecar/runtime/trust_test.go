package runtime

import (
	"context"
	"crypto/ed25519"
	"crypto/rand"
	"crypto/x509"
	"encoding/pem"
	"errors"
	"math/big"
	"strings"
	"testing"
	"time"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	tlsv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/transport_sockets/tls/v3"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/anypb"

	"github.com/weft-mesh/weft/certs/ca"
	"github.com/weft-mesh/weft/certs/manifest"
	"github.com/weft-mesh/weft/certs/revoke"
	"github.com/weft-mesh/weft/certs/spiffe"
	"github.com/weft-mesh/weft/sidecar/runtime/lkg"
	"github.com/weft-mesh/weft/sidecar/xdsclient"
)

// meshCA is the mesh CA on the test clock, and publishers it certifies.
type meshCA struct {
	t      *testing.T
	ca     *ca.CA
	secret map[string]*anypb.Any // ROOTCA by bundle PEM: one CRL per bundle, as pilot re-signs it only when due
}

func newMeshCA(t *testing.T, e *env) *meshCA {
	t.Helper()
	c, err := ca.Open(ca.Config{Dir: t.TempDir(), TrustDomain: DefaultTrustDomain, Now: e.clock.Now})
	if err != nil {
		t.Fatal(err)
	}
	return &meshCA{t: t, ca: c, secret: map[string]*anypb.Any{}}
}

// publisher is a new key certified for ttl from now by the CA's current signer.
func (m *meshCA) publisher(ttl time.Duration) (ed25519.PrivateKey, []*x509.Certificate) {
	m.t.Helper()
	_, key, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		m.t.Fatal(err)
	}
	id, err := spiffe.Publisher(DefaultTrustDomain)
	if err != nil {
		m.t.Fatal(err)
	}
	chain, err := m.ca.SignKey(key.Public(), id, nil, nil, ttl)
	if err != nil {
		m.t.Fatal(err)
	}
	return key, chain
}

// rootCA is the ROOTCA Secret carrying the CA's current bundle, as pilot sends it.
func (m *meshCA) rootCA() *anypb.Any {
	m.t.Helper()
	if a, ok := m.secret[string(m.ca.Bundle().PEM())]; ok {
		return a
	}
	a := m.rootCARevoking()
	m.secret[string(m.ca.Bundle().PEM())] = a
	return a
}

// rootCARevoking is the ROOTCA with a CRL listing serials.
func (m *meshCA) rootCARevoking(serials ...*big.Int) *anypb.Any {
	m.t.Helper()
	issuer, key := m.ca.CRLSigner()
	var es []revoke.Entry
	for _, s := range serials {
		es = append(es, revoke.Entry{Serial: s, RevokedAt: m.ca.Signer().NotBefore})
	}
	crl, err := revoke.Build(issuer, key, int64(1+len(serials)), es, m.ca.Signer().NotBefore, 48*time.Hour)
	if err != nil {
		m.t.Fatal(err)
	}
	b, err := proto.MarshalOptions{Deterministic: true}.Marshal(&tlsv3.Secret{Name: manifest.RootCAName,
		Type: &tlsv3.Secret_ValidationContext{ValidationContext: &tlsv3.CertificateValidationContext{
			TrustedCa: &corev3.DataSource{Specifier: &corev3.DataSource_InlineBytes{InlineBytes: m.ca.Bundle().PEM()}},
			Crl:       &corev3.DataSource{Specifier: &corev3.DataSource_InlineBytes{InlineBytes: pem.EncodeToMemory(&pem.Block{Type: "X509 CRL", Bytes: crl})}}}}})
	if err != nil {
		m.t.Fatal(err)
	}
	return &anypb.Any{TypeUrl: xdsclient.TypeSecret, Value: b}
}

// caRuntime is a runtime trusting roots (the sidecar's --ca-root), no pin.
func (e *env) caRuntime(m *meshCA) *Runtime {
	roots := m.ca.Bundle()
	return e.runtime(func(c *Config) { c.PublisherKey, c.TrustRoots = nil, roots })
}

// push applies res with the CA's ROOTCA, signed by key with chain.
func (e *env) push(r *Runtime, m *meshCA, key ed25519.PrivateKey, chain []*x509.Certificate, rev int64) error {
	e.t.Helper()
	return e.pushSecret(r, m.rootCA(), key, chain, rev)
}

// pushSecret is push with the given ROOTCA.
func (e *env) pushSecret(r *Runtime, secret *anypb.Any, key ed25519.PrivateKey, chain []*x509.Certificate, rev int64) error {
	e.t.Helper()
	res := mesh("127.0.0.1:9001")
	sm := e.sign(res, signOpts{revision: rev, priv: key, chain: chain, rootCA: secret.GetValue()})
	u, err := e.decoded(r, res, "v1", secret, sm)
	if err != nil {
		return err
	}
	return r.Apply(context.Background(), u)
}

// decoded is update, returning the first Decode error (a NACK) instead of failing.
func (e *env) decoded(r *Runtime, res map[string][]proto.Message, version string, extra ...*anypb.Any) (u *xdsclient.Update, err error) {
	e.t.Helper()
	for _, a := range extra {
		if _, _, err := r.Decode(a.GetTypeUrl(), a); err != nil {
			return nil, err
		}
	}
	return e.update(r, res, version, extra...), nil
}

// TestPublisherUnderCA: a sidecar that trusts only the CA (no pinned key)
// accepts manifests from a certified publisher, and, when pilot comes back with
// a new publisher key certified by the same CA, the next push without a
// restart; a restart with pilot down boots from the last-known-good signed by
// the new key.
func TestPublisherUnderCA(t *testing.T) {
	e := newEnv(t)
	m := newMeshCA(t, e)
	r := e.caRuntime(m)
	k1, c1 := m.publisher(24 * time.Hour)
	if err := e.push(r, m, k1, c1, 1); err != nil {
		t.Fatal(err)
	}
	d := r.Dump()
	if !d.Ready || d.Active.Manifest.Publisher != "spiffe://cluster.local/weft/publisher" || d.Active.Manifest.PublisherSerial != c1[0].SerialNumber.Text(16) {
		t.Fatalf("dump: ready %v manifest %+v", d.Ready, d.Active.Manifest)
	}
	k2, c2 := m.publisher(24 * time.Hour) // pilot restarted with a new key
	e.clock.Set(t0.Add(time.Minute))
	if err := e.push(r, m, k2, c2, 1); err != nil {
		t.Fatalf("push signed by the new key: %v", err)
	}
	if got := r.Dump().Active.Manifest.KeyID; got != manifest.KeyID(k2.Public().(ed25519.PublicKey)) {
		t.Fatalf("active manifest key %s, want the new key", got)
	}
	if n := r.Dump().Counters.Activations; n != 1 {
		t.Fatalf("%d activations: same content re-signed must not recompile", n)
	}
	e.flush()
	r2 := e.caRuntime(m)
	if _, err := r2.LoadLastKnownGood(); err != nil {
		t.Fatalf("restart: %v", err)
	}
	if !r2.ActivateLastKnownGood() {
		t.Fatal("last-known-good not activated")
	}
	if got := r2.Dump().Active.Manifest.KeyID; got != manifest.KeyID(k2.Public().(ed25519.PublicKey)) {
		t.Fatalf("restarted on key %s, want the new key", got)
	}
}

// TestPublisherRefusals: every publisher the sidecar must not trust is a NACK
// naming the check, and the active configuration keeps serving.
func TestPublisherRefusals(t *testing.T) {
	e := newEnv(t)
	m := newMeshCA(t, e)
	other := newMeshCA(t, e)
	r := e.caRuntime(m)
	k, c := m.publisher(time.Hour)
	if err := e.push(r, m, k, c, 1); err != nil {
		t.Fatal(err)
	}
	ok, okChain := k, c
	wrongID := func() []*x509.Certificate {
		id, _ := spiffe.Workload(DefaultTrustDomain, "shop", "reviews")
		ch, err := m.ca.SignKey(ok.Public(), id, nil, nil, time.Hour)
		if err != nil {
			t.Fatal(err)
		}
		return ch
	}()
	ko, co := other.publisher(time.Hour)
	tests := []struct {
		name  string
		key   ed25519.PrivateKey
		chain []*x509.Certificate
		now   time.Time
		want  string
	}{
		{"no chain and no pin", ok, nil, t0, "manifest refused (publisher chain): manifest carries no publisher certificate chain, and no publisher key is pinned"},
		{"another CA", ko, co, t0, "manifest refused (publisher chain): publisher certificate chain not trusted: verify SVID serial " + co[0].SerialNumber.Text(16)},
		{"a workload certificate", ok, wrongID, t0, "manifest refused (publisher identity): publisher certificate has the wrong SPIFFE ID: publisher certificate serial " +
			wrongID[0].SerialNumber.Text(16) + " is spiffe://cluster.local/ns/shop/sa/reviews, want spiffe://cluster.local/weft/publisher"},
		{"one second past NotAfter", ok, okChain, okChain[0].NotAfter.Add(time.Second), "manifest refused (publisher certificate validity): publisher certificate outside its validity: publisher certificate serial " +
			okChain[0].SerialNumber.Text(16) + " expired at " + okChain[0].NotAfter.UTC().Format(time.RFC3339)},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			e.clock.Set(tc.now)
			err := e.push(r, m, tc.key, tc.chain, 2)
			if err == nil || !strings.HasPrefix(err.Error(), tc.want) {
				t.Fatalf("err = %v\nwant %s...", err, tc.want)
			}
			if d := r.Dump(); d.Active == nil || d.Active.Revision != 1 {
				t.Fatalf("active after a refusal: %+v", d.Active)
			}
		})
	}
	// At NotAfter itself the certificate is still valid.
	e.clock.Set(okChain[0].NotAfter)
	if err := e.push(r, m, ok, okChain, 3); err != nil {
		t.Fatalf("at NotAfter: %v", err)
	}
	// With a pin beside the CA, a certified key other than the pin is refused.
	pinned := e.runtime(func(c *Config) { c.TrustRoots = m.ca.Bundle(); c.PublisherKey = e.pub })
	e.clock.Set(t0)
	if err := e.push(pinned, m, ok, okChain, 1); err == nil || !strings.Contains(err.Error(), "the pinned key is "+manifest.KeyID(e.pub)) {
		t.Fatalf("certified key, not the pinned one: %v", err)
	}
	// A bad ROOTCA is a NACK naming the field.
	bad, _ := proto.Marshal(&tlsv3.Secret{Name: manifest.RootCAName})
	if _, _, err := r.Decode(xdsclient.TypeSecret, &anypb.Any{TypeUrl: xdsclient.TypeSecret, Value: bad}); err == nil || !strings.Contains(err.Error(), "secret ROOTCA: validation_context: required") {
		t.Fatalf("ROOTCA without a bundle: %v", err)
	}
}

// TestLKGPublisherExpired: the decision for a last-known-good whose publisher
// certificate expired after it signed: the sidecar restarted with pilot down
// still boots from it (routing continues on last-known-good, seed 002), bounded
// by the manifest's own validity; pushes from that certificate are refused.
func TestLKGPublisherExpired(t *testing.T) {
	e := newEnv(t)
	m := newMeshCA(t, e)
	r := e.caRuntime(m)
	k, c := m.publisher(time.Hour)
	if err := e.push(r, m, k, c, 1); err != nil { // manifest valid 24h, certificate 1h
		t.Fatal(err)
	}
	e.flush()
	e.clock.Set(t0.Add(2 * time.Hour))
	r2 := e.caRuntime(m)
	if _, err := r2.LoadLastKnownGood(); err != nil {
		t.Fatalf("restart after the publisher certificate expired: %v", err)
	}
	if !r2.ActivateLastKnownGood() {
		t.Fatal("not activated")
	}
	if err := e.push(r2, m, k, c, 2); err == nil || !strings.Contains(err.Error(), "(publisher certificate validity)") {
		t.Fatalf("push from the expired certificate: %v", err)
	}
	// Past the manifest's validity the file is refused as before.
	e.clock.Set(t0.Add(24*time.Hour + time.Second))
	r3 := e.caRuntime(m)
	if _, err := r3.LoadLastKnownGood(); !errors.Is(err, manifest.ErrExpired) {
		t.Fatalf("past the manifest's validity: %v", err)
	}
}

// TestRootRotation: the overlap bundle arrives signed by a publisher under the
// old root; the manifests after it, signed under the new root, are accepted;
// the last-known-good is trusted again after a restart from --ca-root (the old
// root) through the persisted path; a sidecar that never saw the overlap bundle
// refuses the new root's publisher.
func TestRootRotation(t *testing.T) {
	e := newEnv(t)
	m := newMeshCA(t, e)
	oldRoots := m.ca.Bundle() // the sidecar's --ca-root
	r := e.caRuntime(m)
	k1, c1 := m.publisher(24 * time.Hour)
	if err := e.push(r, m, k1, c1, 1); err != nil {
		t.Fatal(err)
	}
	if err := m.ca.StartRotation(); err != nil {
		t.Fatal(err)
	}
	if err := e.push(r, m, k1, c1, 2); err != nil { // ROOTCA {old, new}, signed under the old root
		t.Fatalf("overlap bundle: %v", err)
	}
	if err := m.ca.FinishRotation(); err != nil {
		t.Fatal(err)
	}
	// Under the new root only (during the overlap certs/ca adds the new root
	// cross-signed by the old, which the old root alone verifies).
	k2, c2 := m.publisher(24 * time.Hour)
	if len(c2) != 1 {
		t.Fatalf("publisher chain after the rotation: %d certificates", len(c2))
	}
	fresh := e.runtime(func(c *Config) { c.PublisherKey, c.TrustRoots, c.StateDir = nil, oldRoots, t.TempDir() })
	if err := e.push(fresh, m, k2, c2, 3); err == nil || !strings.Contains(err.Error(), "(publisher chain)") {
		t.Fatalf("new root's publisher to a sidecar that never saw the overlap: %v", err)
	}
	if err := e.push(r, m, k2, c2, 3); err != nil { // ROOTCA {new}, signed under the new root
		t.Fatalf("after the rotation: %v", err)
	}
	if got := r.Dump().Active.Manifest.TrustPath; got != 1 {
		t.Fatalf("trust path %d, want 1", got)
	}
	if d := r.DeliveredRoots(); d == nil || len(d.Roots()) != 2 {
		t.Fatalf("delivered roots %v, want --ca-root and the new root", d)
	}
	e.flush()
	r2 := e.runtime(func(c *Config) { c.PublisherKey, c.TrustRoots = nil, oldRoots })
	if _, err := r2.LoadLastKnownGood(); err != nil {
		t.Fatalf("restart from --ca-root after the rotation: %v", err)
	}
	if !r2.ActivateLastKnownGood() {
		t.Fatal("not activated")
	}
	// The restarted sidecar trusts the new root's publisher at once.
	k3, c3 := m.publisher(24 * time.Hour)
	e.clock.Set(t0.Add(time.Minute))
	if err := e.push(r2, m, k3, c3, 4); err != nil {
		t.Fatalf("push after restart: %v", err)
	}
	// Its file alone (path removed) proves nothing.
	e.flush()
	snap, _, err := lkg.Load(e.dir, manifest.Trust{Roots: oldRoots, TrustDomain: DefaultTrustDomain}, nodeID, e.clock.Now())
	if err != nil {
		t.Fatal(err)
	}
	snap.Trust = nil
	if err := lkg.Save(e.dir, snap); err != nil {
		t.Fatal(err)
	}
	r3 := e.runtime(func(c *Config) { c.PublisherKey, c.TrustRoots = nil, oldRoots })
	if _, err := r3.LoadLastKnownGood(); !errors.Is(err, manifest.ErrChain) {
		t.Fatalf("file without its trust path: %v", err)
	}
}

// TestPublisherRevoked: once a CRL listing a publisher certificate is accepted
// with the bundle, manifests from that certificate are refused (naming the
// serial and CRL number); another publisher's are accepted; the last-known-good
// it signed before still boots (it was trusted when accepted).
func TestPublisherRevoked(t *testing.T) {
	e := newEnv(t)
	m := newMeshCA(t, e)
	r := e.caRuntime(m)
	bad, badChain := m.publisher(24 * time.Hour)
	good, goodChain := m.publisher(24 * time.Hour)
	if err := e.push(r, m, bad, badChain, 1); err != nil {
		t.Fatal(err)
	}
	// The revocation arrives from the (not yet revoked) publisher itself.
	revoking := m.rootCARevoking(badChain[0].SerialNumber)
	if err := e.pushSecret(r, revoking, bad, badChain, 2); err != nil {
		t.Fatalf("the CRL revoking the publisher: %v", err)
	}
	want := "manifest refused (publisher revocation): publisher certificate revoked: publisher certificate serial " + badChain[0].SerialNumber.Text(16) + " is listed in CRL number 2"
	if err := e.pushSecret(r, revoking, bad, badChain, 3); err == nil || !strings.HasPrefix(err.Error(), want) {
		t.Fatalf("push from the revoked publisher: %v\nwant %s", err, want)
	}
	if err := e.pushSecret(r, revoking, good, goodChain, 3); err != nil {
		t.Fatalf("push from another publisher: %v", err)
	}
}

// TestRotationOutlivesLKG: a sidecar that followed a root rotation, restarted
// after its last-known-good expired (pilot away more than the manifest's
// validity), refuses the file's routing but still trusts the new root's
// publisher from the file's trust path and delivered bundle.
func TestRotationOutlivesLKG(t *testing.T) {
	e := newEnv(t)
	m := newMeshCA(t, e)
	oldRoots := m.ca.Bundle()
	r := e.caRuntime(m)
	k1, c1 := m.publisher(24 * time.Hour)
	if err := m.ca.StartRotation(); err != nil {
		t.Fatal(err)
	}
	if err := e.push(r, m, k1, c1, 1); err != nil { // the overlap bundle, under the old root
		t.Fatal(err)
	}
	if err := m.ca.FinishRotation(); err != nil {
		t.Fatal(err)
	}
	k2, c2 := m.publisher(24 * time.Hour)
	if err := e.push(r, m, k2, c2, 2); err != nil {
		t.Fatal(err)
	}
	e.flush()
	e.clock.Set(t0.Add(48 * time.Hour))
	r2 := e.runtime(func(c *Config) { c.PublisherKey, c.TrustRoots = nil, oldRoots })
	if _, err := r2.LoadLastKnownGood(); !errors.Is(err, manifest.ErrExpired) {
		t.Fatalf("expired last-known-good: %v", err)
	}
	k3, c3 := m.publisher(24 * time.Hour) // under the new root, at the new time
	if err := e.push(r2, m, k3, c3, 3); err != nil {
		t.Fatalf("new root's publisher after the file expired: %v", err)
	}
	// Without the file, the same push is refused: --ca-root alone is the old root.
	r3 := e.runtime(func(c *Config) { c.PublisherKey, c.TrustRoots, c.StateDir = nil, oldRoots, t.TempDir() })
	if err := e.push(r3, m, k3, c3, 3); err == nil || !strings.Contains(err.Error(), "(publisher chain)") {
		t.Fatalf("without the file: %v", err)
	}
}
