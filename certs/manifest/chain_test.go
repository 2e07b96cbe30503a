package manifest

import (
	"crypto/ecdsa"
	"crypto/ed25519"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"errors"
	"math/big"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/weft-mesh/weft/certs/bundle"
	"github.com/weft-mesh/weft/certs/manifest/manifestpb"
	"github.com/weft-mesh/weft/certs/revoke"
	"github.com/weft-mesh/weft/certs/spiffe"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/timestamppb"
)

const td = "cluster.local"

// testCA is a root (or intermediate) that issues certificates in tests.
type testCA struct {
	cert *x509.Certificate
	key  ed25519.PrivateKey
}

var serial int64 = 100

func issue(t testing.TB, parent *testCA, pub any, tmpl *x509.Certificate) *x509.Certificate {
	t.Helper()
	serial++
	tmpl.SerialNumber = big.NewInt(serial)
	der, err := x509.CreateCertificate(rand.Reader, tmpl, parent.cert, pub, parent.key)
	if err != nil {
		t.Fatal(err)
	}
	c, err := x509.ParseCertificate(der)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

func caTemplate(name string) *x509.Certificate {
	return &x509.Certificate{Subject: pkix.Name{CommonName: name}, NotBefore: t0.Add(-24 * time.Hour), NotAfter: t0.Add(365 * 24 * time.Hour),
		IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign | x509.KeyUsageCRLSign}
}

func newRoot(t testing.TB, name string) *testCA {
	t.Helper()
	pub, key, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := caTemplate(name)
	serial++
	tmpl.SerialNumber = big.NewInt(serial)
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, pub, key)
	if err != nil {
		t.Fatal(err)
	}
	c, err := x509.ParseCertificate(der)
	if err != nil {
		t.Fatal(err)
	}
	return &testCA{cert: c, key: key}
}

func (ca *testCA) intermediate(t testing.TB, name string) *testCA {
	t.Helper()
	pub, key, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	return &testCA{cert: issue(t, ca, pub, caTemplate(name)), key: key}
}

func (ca *testCA) bundle(t testing.TB) *bundle.Bundle {
	t.Helper()
	b, err := bundle.New(ca.cert)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// leaf issues an SVID for id (a SPIFFE ID string) valid [nb, na] holding pub.
func (ca *testCA) leaf(t testing.TB, pub any, id string, nb, na time.Time) *x509.Certificate {
	t.Helper()
	u, err := url.Parse(id)
	if err != nil {
		t.Fatal(err)
	}
	return issue(t, ca, pub, &x509.Certificate{Subject: pkix.Name{CommonName: "publisher"}, URIs: []*url.URL{u}, NotBefore: nb, NotAfter: na,
		KeyUsage: x509.KeyUsageDigitalSignature})
}

func publisherID(t testing.TB) string {
	id, err := spiffe.Publisher(td)
	if err != nil {
		t.Fatal(err)
	}
	return id.String()
}

// chained assembles content and binding signed by priv with chain.
func chained(t testing.TB, priv ed25519.PrivateKey, c Content, b Binding, chain ...*x509.Certificate) *manifestpb.SignedManifest {
	t.Helper()
	sc, err := SignContent(priv, c)
	if err != nil {
		t.Fatal(err)
	}
	sb, err := SignBinding(priv, b)
	if err != nil {
		t.Fatal(err)
	}
	sm, err := Assemble(sc, sb, chain...)
	if err != nil {
		t.Fatal(err)
	}
	return sm
}

func TestChainRoundTrip(t *testing.T) {
	root := newRoot(t, "root")
	priv := newKey(t)
	pub := priv.Public().(ed25519.PublicKey)
	cert := root.leaf(t, pub, publisherID(t), t0.Add(-time.Hour), t0.Add(48*time.Hour))
	c := sampleContent(t, "s")
	c.RootCA, c.HasRootCA = Hash([]byte("bundle")), true
	sm := chained(t, priv, c, binding("n", "s"), cert)
	if n := proto.Size(sm); n > MaxBytes/8 {
		t.Errorf("manifest with a one-certificate chain is %d bytes", n)
	}
	for _, tr := range []Trust{{Roots: root.bundle(t), TrustDomain: td}, {Roots: root.bundle(t), TrustDomain: td, Pin: pub}, {Pin: pub}} {
		m, err := tr.Verify(sm, "n", t0)
		if err != nil {
			t.Fatalf("%+v: %v", tr, err)
		}
		if !m.HasRootCA || m.RootCA != c.RootCA {
			t.Fatalf("root CA hash not carried: %+v", m)
		}
		// Pin alone ignores the chain (a sidecar without --ca-root).
		if got := m.Publisher != nil; got != (tr.Roots != nil) {
			t.Fatalf("%+v: Publisher set = %v", tr, got)
		}
	}
	// Decoded from the wire, the chain survives.
	b, err := proto.Marshal(sm)
	if err != nil {
		t.Fatal(err)
	}
	sm2, err := Decode(b)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := (Trust{Roots: root.bundle(t), TrustDomain: td}).Verify(sm2, "n", t0); err != nil {
		t.Fatal(err)
	}
}

func TestChainThroughIntermediates(t *testing.T) {
	root := newRoot(t, "root")
	priv := newKey(t)
	pub := priv.Public().(ed25519.PublicKey)
	// MaxChainCerts: the leaf and MaxChainCerts-1 intermediates; one more is refused.
	cas := []*testCA{root}
	for i := 0; i < MaxChainCerts; i++ {
		cas = append(cas, cas[len(cas)-1].intermediate(t, "int"))
	}
	chainUnder := func(n int) []*x509.Certificate { // n intermediates
		issuer := cas[n]
		chain := []*x509.Certificate{issuer.leaf(t, pub, publisherID(t), t0.Add(-time.Hour), t0.Add(time.Hour))}
		for i := n; i >= 1; i-- {
			chain = append(chain, cas[i].cert)
		}
		return chain
	}
	tr := Trust{Roots: root.bundle(t), TrustDomain: td}
	ok := chained(t, priv, sampleContent(t, "s"), binding("n", "s"), chainUnder(MaxChainCerts-1)...)
	if _, err := tr.Verify(ok, "n", t0); err != nil {
		t.Fatalf("chain of %d: %v", MaxChainCerts, err)
	}
	// Assemble refuses one more; a hostile manifest carrying one more is refused too.
	sc, _ := SignContent(priv, sampleContent(t, "s"))
	sb, _ := SignBinding(priv, binding("n", "s"))
	long := chainUnder(MaxChainCerts)
	if _, err := Assemble(sc, sb, long...); err == nil || !strings.Contains(err.Error(), "limit 4") {
		t.Fatalf("Assemble with %d certificates: %v", len(long), err)
	}
	over := proto.Clone(ok).(*manifestpb.SignedManifest)
	over.PublisherChain = nil
	for _, c := range long {
		over.PublisherChain = append(over.PublisherChain, c.Raw)
	}
	if _, err := tr.Verify(over, "n", t0); !errors.Is(err, ErrMalformed) || !strings.Contains(err.Error(), "5 certificates, limit 4") {
		t.Fatalf("chain of %d: %v", len(long), err)
	}
}

func TestChainRefusals(t *testing.T) {
	root, other := newRoot(t, "root"), newRoot(t, "other")
	priv := newKey(t)
	pub := priv.Public().(ed25519.PublicKey)
	otherKey := newKey(t)
	nb, na := t0.Add(-time.Hour), t0.Add(time.Hour)
	good := root.leaf(t, pub, publisherID(t), nb, na)
	content, bind := sampleContent(t, "s"), binding("n", "s")
	withChain := func(chain ...*x509.Certificate) *manifestpb.SignedManifest {
		return chained(t, priv, content, bind, chain...)
	}
	ecKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	ecLeaf := root.leaf(t, &ecKey.PublicKey, publisherID(t), nb, na)
	ecManifest := withChain(good)
	ecManifest.PublisherChain = [][]byte{ecLeaf.Raw}
	// A certified key other than the signing one.
	swapped := withChain(good)
	swapped.PublisherChain = [][]byte{root.leaf(t, otherKey.Public(), publisherID(t), nb, na).Raw}
	garbage := withChain(good)
	garbage.PublisherChain = [][]byte{[]byte("not DER")}

	trust := Trust{Roots: root.bundle(t), TrustDomain: td}
	pinOther := trust
	pinOther.Pin = otherKey.Public().(ed25519.PublicKey)
	otherTD := trust
	otherTD.TrustDomain = "other.example"
	revoking := trust
	der, err := revoke.Build(root.cert, root.key, 7, []revoke.Entry{{Serial: good.SerialNumber, RevokedAt: t0}}, t0.Add(-time.Hour), 48*time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	if revoking.CRL, err = revoke.Parse(der, root.bundle(t)); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name  string
		trust Trust
		sm    *manifestpb.SignedManifest
		now   time.Time
		want  error
		msg   string // substring the error must name
	}{
		{"no chain, no pin", trust, withChain(), t0, ErrNoChain, "no publisher key is pinned"},
		{"no bundle, no pin", Trust{}, withChain(good), t0, ErrChain, "no trust bundle"},
		{"chain from another CA", Trust{Roots: other.bundle(t), TrustDomain: td}, withChain(good), t0, ErrChain, "verify SVID serial"},
		{"a workload's certificate", trust, withChain(root.leaf(t, pub, "spiffe://cluster.local/ns/shop/sa/reviews", nb, na)), t0, ErrPublisherID,
			"is spiffe://cluster.local/ns/shop/sa/reviews, want spiffe://cluster.local/weft/publisher"},
		{"another trust domain's publisher", otherTD, withChain(good), t0, ErrPublisherID, "want spiffe://other.example/weft/publisher"},
		{"one second past NotAfter", trust, withChain(good), na.Add(time.Second), ErrPublisherExpired, "expired at " + na.Format(time.RFC3339)},
		{"one second before NotBefore", trust, withChain(good), nb.Add(-time.Second), ErrPublisherExpired, "not valid before " + nb.Format(time.RFC3339)},
		{"listed in the CRL", revoking, withChain(good), t0, ErrPublisherRevoked, "is listed in CRL number 7"},
		{"not the pinned key", pinOther, withChain(good), t0, ErrKey, "the pinned key is " + KeyID(pinOther.Pin)},
		{"leaf holds another key", trust, swapped, t0, ErrKey, `publisher key is "` + KeyID(otherKey.Public().(ed25519.PublicKey))},
		{"leaf not Ed25519", trust, ecManifest, t0, ErrKey, "want Ed25519"},
		{"chain not DER", trust, garbage, t0, ErrMalformed, "publisher_chain[0]"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			_, err := tc.trust.Verify(tc.sm, "n", tc.now)
			if !errors.Is(err, tc.want) || !strings.Contains(err.Error(), tc.msg) {
				t.Fatalf("err = %v, want %v naming %q", err, tc.want, tc.msg)
			}
		})
	}
	// At the bounds themselves the certificate is valid (x509: inclusive).
	for _, at := range []time.Time{nb, na} {
		if _, err := trust.Verify(withChain(good), "n", at); errors.Is(err, ErrPublisherExpired) {
			t.Fatalf("at %s: %v", at, err)
		}
	}
	all := []error{ErrMalformed, ErrKey, ErrSignature, ErrNode, ErrScope, ErrExpired, ErrNotYet, ErrMismatch, ErrNoChain, ErrChain, ErrPublisherID, ErrPublisherExpired, ErrPublisherRevoked}
	for i, a := range all {
		for j, b := range all {
			if i != j && errors.Is(a, b) {
				t.Errorf("%v is %v", a, b)
			}
		}
	}
}

// A persisted manifest is judged by its publisher certificate at signing time:
// a certificate that expired since does not void it (its own validity still
// does); one that had expired when it signed does.
func TestVerifyStored(t *testing.T) {
	root := newRoot(t, "root")
	priv := newKey(t)
	pub := priv.Public().(ed25519.PublicKey)
	trust := Trust{Roots: root.bundle(t), TrustDomain: td}
	cert := root.leaf(t, pub, publisherID(t), t0.Add(-time.Hour), t0.Add(time.Hour))
	sm := chained(t, priv, sampleContent(t, "s"), binding("n", "s"), cert) // signed at t0, valid 24h
	later := t0.Add(2 * time.Hour)                                         // the certificate has expired
	if _, err := trust.Verify(sm, "n", later); !errors.Is(err, ErrPublisherExpired) {
		t.Fatalf("Verify after NotAfter: %v", err)
	}
	m, err := trust.VerifyStored(sm, "n", later)
	if err != nil {
		t.Fatalf("VerifyStored after NotAfter: %v", err)
	}
	if m.Publisher == nil || m.Publisher.SerialNumber.Cmp(cert.SerialNumber) != 0 {
		t.Fatalf("publisher %v", m.Publisher)
	}
	if _, err := trust.VerifyStored(sm, "n", t0.Add(24*time.Hour)); !errors.Is(err, ErrExpired) {
		t.Fatalf("VerifyStored past the manifest's validity: %v", err)
	}
	// Signed after the certificate expired: refused, naming when it signed.
	c, b := sampleContent(t, "s"), binding("n", "s")
	c.IssuedAt, b.IssuedAt = t0.Add(90*time.Minute), t0.Add(90*time.Minute)
	late := chained(t, priv, c, b, cert)
	if _, err := trust.VerifyStored(late, "n", later); !errors.Is(err, ErrPublisherExpired) || !strings.Contains(err.Error(), "when it signed") {
		t.Fatalf("VerifyStored of a manifest signed after NotAfter: %v", err)
	}
	// A backdated issue time fails the signature (it is read before it is checked).
	tampered := proto.Clone(late).(*manifestpb.SignedManifest)
	var pc manifestpb.Content
	if err := proto.Unmarshal(tampered.Content, &pc); err != nil {
		t.Fatal(err)
	}
	pc.IssuedAt = timestamppb.New(t0)
	tampered.Content, _ = proto.MarshalOptions{Deterministic: true}.Marshal(&pc)
	if _, err := trust.VerifyStored(tampered, "n", later); !errors.Is(err, ErrPublisherExpired) && !errors.Is(err, ErrSignature) {
		t.Fatalf("backdated content: %v", err)
	}
}

func TestMaxValidity(t *testing.T) {
	priv := newKey(t)
	pub := priv.Public().(ed25519.PublicKey)
	c := sampleContent(t, "s")
	c.ValidUntil = c.IssuedAt.Add(MaxValidity)
	if _, err := Verify(pub, signed(t, priv, c, binding("n", "s")), "n", t0); err != nil {
		t.Fatalf("valid for MaxValidity: %v", err)
	}
	c.ValidUntil = c.IssuedAt.Add(MaxValidity + time.Second)
	if _, err := SignContent(priv, c); err == nil {
		t.Fatal("SignContent valid one second past MaxValidity")
	}
	// A signer that ignores the bound (a bug, another implementation) is refused.
	body, err := signPart(priv, contentContext, &manifestpb.Content{Scope: "s", Digest: make([]byte, 32), Count: 2,
		IssuedAt: timestamppb.New(t0), ValidUntil: timestamppb.New(t0.Add(MaxValidity + time.Second))})
	if err != nil {
		t.Fatal(err)
	}
	sm := signed(t, priv, sampleContent(t, "s"), binding("n", "s"))
	sm.Content, sm.ContentSignature = body.Body, body.Signature
	if _, err := Verify(pub, sm, "n", t0); !errors.Is(err, ErrExpired) || !strings.Contains(err.Error(), "content valid for 720h0m1s") {
		t.Fatalf("verify valid past MaxValidity: %v", err)
	}
	// A root CA hash of the wrong size is malformed.
	bad, err := signPart(priv, contentContext, &manifestpb.Content{Scope: "s", Digest: make([]byte, 32), RootCaSha256: []byte{1},
		IssuedAt: timestamppb.New(t0), ValidUntil: timestamppb.New(t0.Add(time.Hour))})
	if err != nil {
		t.Fatal(err)
	}
	sm.Content, sm.ContentSignature = bad.Body, bad.Signature
	if _, err := Verify(pub, sm, "n", t0); !errors.Is(err, ErrMalformed) || !strings.Contains(err.Error(), "root_ca_sha256") {
		t.Fatalf("short root CA hash: %v", err)
	}
}

func TestVerifyEndorsement(t *testing.T) {
	root := newRoot(t, "root")
	priv := newKey(t)
	trust := Trust{Roots: root.bundle(t), TrustDomain: td}
	cert := root.leaf(t, priv.Public(), publisherID(t), t0.Add(-time.Hour), t0.Add(time.Hour))
	sm := chained(t, priv, sampleContent(t, "s"), binding("n", "s"), cert)
	year := t0.Add(365 * 24 * time.Hour)
	if _, err := trust.VerifyStored(sm, "n", year); !errors.Is(err, ErrExpired) {
		t.Fatalf("VerifyStored a year on: %v", err)
	}
	if _, err := trust.VerifyEndorsement(sm, "n", year); err != nil {
		t.Fatalf("VerifyEndorsement a year on: %v", err)
	}
	// Everything else still holds: another node's, another CA's.
	if _, err := trust.VerifyEndorsement(sm, "m", year); !errors.Is(err, ErrNode) {
		t.Fatalf("another node's endorsement: %v", err)
	}
	if _, err := (Trust{Roots: newRoot(t, "x").bundle(t), TrustDomain: td}).VerifyEndorsement(sm, "n", year); !errors.Is(err, ErrChain) {
		t.Fatalf("another CA's endorsement: %v", err)
	}
}

// BenchmarkVerify: what a sidecar pays per manifest, pinned key vs the chain
// checked against the bundle (go-spiffe's X.509-SVID verification).
func BenchmarkVerify(b *testing.B) {
	root := newRoot(b, "root")
	priv := newKey(b)
	cert := root.leaf(b, priv.Public(), publisherID(b), t0.Add(-time.Hour), t0.Add(time.Hour))
	sm := chained(b, priv, sampleContent(b, "s"), binding("n", "s"), cert)
	for _, tc := range []struct {
		name  string
		trust Trust
	}{{"pin", Trust{Pin: priv.Public().(ed25519.PublicKey)}}, {"chain", Trust{Roots: root.bundle(b), TrustDomain: td}}} {
		b.Run(tc.name, func(b *testing.B) {
			for b.Loop() {
				if _, err := tc.trust.Verify(sm, "n", t0); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
