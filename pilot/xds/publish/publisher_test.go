package publish

import (
	"context"
	"crypto/ed25519"
	"crypto/x509"
	"strings"
	"sync"
	"testing"
	"time"

	tlsv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/transport_sockets/tls/v3"
	"github.com/hashicorp/go-hclog"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/weft-mesh/weft/bootstrap/node"
	"github.com/weft-mesh/weft/certs/ca"
	"github.com/weft-mesh/weft/certs/manifest"
	"github.com/weft-mesh/weft/certs/manifest/manifestpb"
	"github.com/weft-mesh/weft/certs/spiffe"
	pilotca "github.com/weft-mesh/weft/pilot/ca"
	"github.com/weft-mesh/weft/pilot/ir"
	"github.com/weft-mesh/weft/pilot/store/boltstore"
	"github.com/weft-mesh/weft/pilot/xds/meshcache"
	"github.com/weft-mesh/weft/pilot/xds/snapshot"
	"github.com/weft-mesh/weft/sidecar/runtime"
	"github.com/weft-mesh/weft/tools/testkit"
)

// rotating is a publisher whose key and certificate a test replaces, as
// pilot/ca does on renewal or when pilot starts with a new key.
type rotating struct {
	mu    sync.Mutex
	key   ed25519.PrivateKey
	chain []*x509.Certificate
}

func (r *rotating) get() (ed25519.PrivateKey, []*x509.Certificate) {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.key, r.chain
}

func (r *rotating) set(t *testing.T, c *ca.CA, key ed25519.PrivateKey, ttl time.Duration) {
	t.Helper()
	id, err := spiffe.Publisher("cluster.local")
	if err != nil {
		t.Fatal(err)
	}
	chain, err := c.SignKey(key.Public(), id, nil, nil, ttl)
	if err != nil {
		t.Fatal(err)
	}
	r.mu.Lock()
	r.key, r.chain = key, chain
	r.mu.Unlock()
}

// connected starts a Source over a real meshcache (a fixed generated snapshot)
// and connects the sidecar.
func connected(t *testing.T, cfg Config) *watch {
	t.Helper()
	st, err := boltstore.Open(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	snap, err := snapshot.New(1, map[string]map[string]proto.Message{snapshot.ClusterType: {"c": wrapperspb.String("c")}})
	if err != nil {
		t.Fatal(err)
	}
	if cfg.Logger == nil {
		cfg.Logger = hclog.NewNullLogger()
	}
	cfg.Validity = time.Hour
	cfg.ReportGenError = func(string, int64, string) {}
	src := newSource(cfg)
	// checkSidecar decodes real Envoy types; this test's snapshot holds none it reads.
	src.checked.run = func(*snapshot.Snapshot) error { return nil }
	cache, err := meshcache.New(meshcache.Config{Store: st, Logger: hclog.NewNullLogger(), Debounce: time.Millisecond, MaxDelay: 10 * time.Millisecond, GenWorkers: 1,
		Generate: src.Generate(func(*ir.Mesh, *node.Node) (*snapshot.Snapshot, error) { return snap, nil })})
	if err != nil {
		t.Fatal(err)
	}
	src.Use(cache)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- cache.Run(ctx) }()
	aw, err := src.Connect(sidecar)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		aw.Close()
		cancel()
		<-done
		st.Close()
	})
	return aw.(*watch)
}

func manifestOf(t *testing.T, s *snapshot.Snapshot) *manifestpb.SignedManifest {
	t.Helper()
	r, ok := s.Resources[snapshot.ManifestType][manifest.Name]
	if !ok {
		t.Fatal("no manifest in the snapshot")
	}
	var sm manifestpb.SignedManifest
	if err := r.Any.UnmarshalTo(&sm); err != nil {
		t.Fatal(err)
	}
	return &sm
}

// TestPublisherRotates: every push is signed by the publisher of the moment and
// carries its chain; a sidecar trusting the CA verifies each without a pin. A
// renewed certificate for the same key is sent without re-signing the parts; a
// new key signs both parts anew.
func TestPublisherRotates(t *testing.T) {
	c, err := ca.Open(ca.Config{Dir: t.TempDir(), TrustDomain: "cluster.local"})
	if err != nil {
		t.Fatal(err)
	}
	trust := manifest.Trust{Roots: c.Bundle(), TrustDomain: "cluster.local"}
	pub := &rotating{}
	k1 := testKey(t)
	pub.set(t, c, k1, time.Hour)
	w := connected(t, Config{Publisher: pub.get})
	var s *snapshot.Snapshot
	testkit.Eventually(t, 5*time.Second, "first snapshot", func() bool { s = w.Snapshot(); return s != nil })
	sm1 := manifestOf(t, s)
	m1, err := trust.Verify(sm1, sidecar.ID, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	if m1.Publisher == nil || m1.KeyID != manifest.KeyID(k1.Public().(ed25519.PublicKey)) {
		t.Fatalf("first manifest: key %s publisher %v", m1.KeyID, m1.Publisher)
	}
	if again := w.Snapshot(); manifestOf(t, again).String() != sm1.String() {
		t.Fatal("nothing changed, yet the manifest changed")
	}

	_, oldChain := pub.get()
	pub.set(t, c, k1, 2*time.Hour) // renewed: same key, new certificate
	sm2 := manifestOf(t, w.Snapshot())
	if _, err := trust.Verify(sm2, sidecar.ID, time.Now()); err != nil {
		t.Fatal(err)
	}
	if string(sm2.PublisherChain[0]) == string(oldChain[0].Raw) {
		t.Fatal("renewed certificate not sent")
	}
	if string(sm2.Content) != string(sm1.Content) || string(sm2.Binding) != string(sm1.Binding) {
		t.Fatal("same key: parts signed again")
	}

	k2 := testKey(t)
	pub.set(t, c, k2, time.Hour) // a new key (pilot restarted without its key file)
	sm3 := manifestOf(t, w.Snapshot())
	m3, err := trust.Verify(sm3, sidecar.ID, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	if m3.KeyID != manifest.KeyID(k2.Public().(ed25519.PublicKey)) {
		t.Fatalf("new key not used: %s", m3.KeyID)
	}
	// Pinning the old key refuses it: the pin is the operator's choice.
	if _, err := (manifest.Trust{Roots: c.Bundle(), TrustDomain: "cluster.local", Pin: k1.Public().(ed25519.PublicKey)}).Verify(sm3, sidecar.ID, time.Now()); err == nil {
		t.Fatal("pinned old key accepted the new publisher")
	}
}

// TestPublisherRecheck: a stream wakes halfway to the publisher certificate's
// NotAfter (not at the manifest's half-life only), to send a renewed one.
func TestPublisherRecheck(t *testing.T) {
	c, err := ca.Open(ca.Config{Dir: t.TempDir(), TrustDomain: "cluster.local"})
	if err != nil {
		t.Fatal(err)
	}
	pub := &rotating{}
	pub.set(t, c, testKey(t), 2*time.Second)
	w := connected(t, Config{Publisher: pub.get})
	testkit.Eventually(t, 5*time.Second, "first snapshot", func() bool { return w.Snapshot() != nil })
	for len(w.Changed()) > 0 {
		<-w.Changed()
	}
	start := time.Now()
	select {
	case <-w.Changed():
	case <-time.After(5 * time.Second):
		t.Fatal("no wake-up before the publisher certificate expires")
	}
	if took := time.Since(start); took > 1500*time.Millisecond {
		t.Fatalf("woke after %s, want about half the certificate's remaining 2s", took)
	}
}

// TestRootCAPushed: with pilot/ca as TrustSource and publisher, every Weft
// sidecar's snapshot carries the ROOTCA Secret (bundle and CRL, the Wire shape)
// covered by its manifest and committed apart; a revocation (a new CRL) wakes
// the stream and the next snapshot carries the new CRL, signed anew. The
// sidecar's runtime accepts the ROOTCA it is sent.
func TestRootCAPushed(t *testing.T) {
	svc, err := pilotca.New(pilotca.ServiceConfig{DataDir: t.TempDir(), Logger: hclog.NewNullLogger()})
	if err != nil {
		t.Fatal(err)
	}
	w := connected(t, Config{Publisher: svc.Publisher, Trust: svc})
	var s *snapshot.Snapshot
	testkit.Eventually(t, 5*time.Second, "first snapshot", func() bool { s = w.Snapshot(); return s != nil })
	check := func(s *snapshot.Snapshot) (*manifest.Manifest, []byte) {
		t.Helper()
		r, ok := s.Resources[snapshot.SecretType][manifest.RootCAName]
		if !ok {
			t.Fatal("no ROOTCA in the snapshot")
		}
		var sec tlsv3.Secret
		if err := r.Any.UnmarshalTo(&sec); err != nil {
			t.Fatal(err)
		}
		vc := sec.GetValidationContext()
		if string(vc.GetTrustedCa().GetInlineBytes()) != string(svc.Bundle().PEM()) || len(vc.GetCrl().GetInlineBytes()) == 0 {
			t.Fatalf("ROOTCA %v", &sec)
		}
		if _, _, err := runtime.DecodeSecret(r.Any); err != nil {
			t.Fatalf("the sidecar refuses the ROOTCA: %v", err)
		}
		m, err := manifest.Trust{Roots: svc.Bundle(), TrustDomain: "cluster.local"}.Verify(manifestOf(t, s), sidecar.ID, time.Now())
		if err != nil {
			t.Fatal(err)
		}
		have := map[string]map[string][32]byte{}
		for typ, byName := range s.Resources {
			have[typ] = map[string][32]byte{}
			for n, r := range byName {
				have[typ][n] = manifest.Hash(r.Any.GetValue())
			}
		}
		if err := m.Match(have, manifest.TypeURL); err != nil {
			t.Fatal(err)
		}
		if !m.HasRootCA || m.RootCA != manifest.Hash(r.Any.GetValue()) {
			t.Fatal("content does not commit to the ROOTCA apart")
		}
		return m, vc.GetCrl().GetInlineBytes()
	}
	m1, crl1 := check(s)
	for len(w.Changed()) > 0 {
		<-w.Changed()
	}
	id, err := spiffe.Workload("cluster.local", "shop", "reviews")
	if err != nil {
		t.Fatal(err)
	}
	if _, _, err := svc.Revoke("", id.String(), ""); err != nil {
		t.Fatal(err)
	}
	select {
	case <-w.Changed():
	case <-time.After(5 * time.Second):
		t.Fatal("a new CRL did not wake the stream")
	}
	m2, crl2 := check(w.Snapshot())
	if string(crl1) == string(crl2) || m1.Digest == m2.Digest {
		t.Fatal("the new CRL was not sent, or not signed")
	}
}

// fixedTrust is a TrustSource that never changes (a refusal fixture).
type fixedTrust struct{ t *pilotca.Trust }

func (f fixedTrust) Trust() *pilotca.Trust         { return f.t }
func (f fixedTrust) TrustChanged() <-chan struct{} { return nil }

// TestRootCARefused: a trust the sidecar would refuse (no CRL, a bundle that
// does not parse) is not sent: the snapshot goes without ROOTCA (still signed)
// and the refusal is logged once, naming the version and the field.
func TestRootCARefused(t *testing.T) {
	for _, tc := range []struct {
		name  string
		trust *pilotca.Trust
		want  string
	}{
		{"no CRL", &pilotca.Trust{Version: "v1", BundlePEM: []byte("x")}, `version=v1 error="trust version \"v1\": bundle and CRL required"`},
		{"bundle not PEM", &pilotca.Trust{Version: "v2", BundlePEM: []byte("junk"), CRLPEM: []byte("junk")}, `version=v2 error="trust version \"v2\": SDS \"ROOTCA\": invalid resource: secret ROOTCA: validation_context.trusted_ca: bundle:`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			logs := &logBuf{}
			w := connected(t, Config{Key: testKey(t), Trust: fixedTrust{tc.trust},
				Logger: hclog.New(&hclog.LoggerOptions{Output: logs, Level: hclog.Error})})
			var s *snapshot.Snapshot
			testkit.Eventually(t, 5*time.Second, "first snapshot", func() bool { s = w.Snapshot(); return s != nil })
			w.Snapshot()
			if _, ok := s.Resources[snapshot.SecretType][manifest.RootCAName]; ok {
				t.Fatal("a refused ROOTCA was sent")
			}
			if _, ok := s.Resources[snapshot.ManifestType][manifest.Name]; !ok {
				t.Fatal("no manifest")
			}
			if n := strings.Count(logs.String(), tc.want); n != 1 {
				t.Fatalf("%d log lines naming %q:\n%s", n, tc.want, logs.String())
			}
		})
	}
}

// logBuf collects log output across goroutines.
type logBuf struct {
	mu sync.Mutex
	b  strings.Builder
}

func (l *logBuf) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *logBuf) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}
