package sign

import (
	"crypto/ed25519"
	"errors"
	"strings"
	"testing"
	"time"

	"go.uber.org/goleak"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/weft-mesh/weft/certs/ca"
	"github.com/weft-mesh/weft/certs/manifest"
	"github.com/weft-mesh/weft/certs/manifest/manifestpb"
	"github.com/weft-mesh/weft/certs/spiffe"
	"github.com/weft-mesh/weft/pilot/xds/snapshot"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

var issued = time.Date(2026, 11, 29, 12, 0, 0, 0, time.UTC)

func key(t *testing.T, seed byte) ed25519.PrivateKey {
	t.Helper()
	s := make([]byte, ed25519.SeedSize)
	s[0] = seed
	return ed25519.NewKeyFromSeed(s)
}

func testSnap(t *testing.T) *snapshot.Snapshot {
	t.Helper()
	s, err := snapshot.New(7, map[string]map[string]proto.Message{
		snapshot.ClusterType:  {"a": wrapperspb.String("cluster a"), "b": wrapperspb.String("cluster b")},
		snapshot.ListenerType: {"outbound": wrapperspb.String("listener")},
	})
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func hashes(s *snapshot.Snapshot) map[string]map[string][32]byte {
	have := map[string]map[string][32]byte{}
	for typ, byName := range s.Resources {
		have[typ] = map[string][32]byte{}
		for n, r := range byName {
			have[typ][n] = manifest.Hash(r.Any.GetValue())
		}
	}
	return have
}

func TestManifestVerifiesAndMatches(t *testing.T) {
	priv := key(t, 1)
	snap := testSnap(t)
	r, err := Manifest(priv, "node-1", snap, issued, 0)
	if err != nil {
		t.Fatal(err)
	}
	if r.Name != manifest.Name || r.Any.GetTypeUrl() != manifest.TypeURL || r.Version == "" {
		t.Fatalf("resource = %q %q version %q", r.Name, r.Any.GetTypeUrl(), r.Version)
	}
	var sm manifestpb.SignedManifest
	if err := proto.Unmarshal(r.Any.GetValue(), &sm); err != nil {
		t.Fatal(err)
	}
	m, err := manifest.Verify(priv.Public().(ed25519.PublicKey), &sm, "node-1", issued.Add(time.Hour))
	if err != nil {
		t.Fatal(err)
	}
	if m.Revision != 7 || !m.ValidUntil.Equal(issued.Add(DefaultValidity)) || m.Count != 3 || m.Scope != "node/node-1" {
		t.Fatalf("manifest = rev %d scope %q valid until %s, %d entries", m.Revision, m.Scope, m.ValidUntil, m.Count)
	}
	if err := m.Match(hashes(snap)); err != nil {
		t.Fatalf("Match: %v", err)
	}
	// One changed resource no longer matches.
	have := hashes(snap)
	have[snapshot.ClusterType]["a"] = manifest.Hash([]byte("other"))
	if err := m.Match(have); !errors.Is(err, manifest.ErrMismatch) {
		t.Fatalf("Match after change = %v, want ErrMismatch", err)
	}
}

func TestWithAddsManifestAndKeepsVersions(t *testing.T) {
	priv := key(t, 2)
	snap := testSnap(t)
	out, err := With(priv, "node-1", snap, issued, time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	if out.Revision != snap.Revision {
		t.Fatalf("revision %d, want %d", out.Revision, snap.Revision)
	}
	for _, typ := range []string{snapshot.ClusterType, snapshot.ListenerType} {
		if out.Version(typ) != snap.Version(typ) {
			t.Errorf("%s version changed", typ)
		}
	}
	if out.Version(manifest.TypeURL) == "" {
		t.Fatal("no manifest in result")
	}
	// Signing a snapshot that already holds a manifest does not cover the old one.
	again, err := Manifest(priv, "node-1", out, issued, time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	var sm manifestpb.SignedManifest
	if err := proto.Unmarshal(again.Any.GetValue(), &sm); err != nil {
		t.Fatal(err)
	}
	m, err := manifest.Verify(priv.Public().(ed25519.PublicKey), &sm, "node-1", issued)
	if err != nil {
		t.Fatal(err)
	}
	if m.Count != 3 {
		t.Fatalf("%d entries, want 3", m.Count)
	}
	if err := m.Match(hashes(out), manifest.TypeURL); err != nil {
		t.Fatalf("Match ignoring the old manifest: %v", err)
	}
}

func TestManifestRejects(t *testing.T) {
	priv := key(t, 3)
	snap := testSnap(t)
	tests := []struct {
		name     string
		priv     ed25519.PrivateKey
		node     string
		snap     *snapshot.Snapshot
		issued   time.Time
		validity time.Duration
		want     string
	}{
		{"short key", priv[:10], "n", snap, issued, 0, `sign manifest content for scope "node/n": private key: 10 bytes, want 64`},
		{"no node", priv, "", snap, issued, 0, "sign manifest: node id: required"},
		{"nil snapshot", priv, "n", nil, issued, 0, `sign manifest content for scope "node/n": nil snapshot`},
		{"negative validity", priv, "n", snap, issued, -time.Second, `sign manifest content for scope "node/n": validity -1s outside 0..720h0m0s`},
		{"too long validity", priv, "n", snap, issued, MaxValidity + 1, `sign manifest content for scope "node/n": validity 720h0m0.000000001s outside 0..720h0m0s`},
		{"no issue time", priv, "n", snap, time.Time{}, 0, `sign manifest content for scope "node/n": issued time: required`},
		{"unmarshalled resource", priv, "n", snapshot.FromResources(1, map[string]map[string]snapshot.Resource{snapshot.ClusterType: {"x": {Name: "x"}}}), issued, 0,
			`sign manifest content for scope "node/n": type.googleapis.com/envoy.config.cluster.v3.Cluster "x": no marshalled value`},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			_, err := Manifest(tc.priv, tc.node, tc.snap, tc.issued, tc.validity)
			if err == nil || err.Error() != tc.want {
				t.Fatalf("err = %v, want %q", err, tc.want)
			}
			if _, err := With(tc.priv, tc.node, tc.snap, tc.issued, tc.validity); err == nil || !strings.HasPrefix(err.Error(), "sign manifest") {
				t.Fatalf("With err = %v", err)
			}
		})
	}
}

// ADS serves only snapshot.PushOrder types: the manifest must be one of them, last.
func TestManifestTypeIsPushedLast(t *testing.T) {
	if snapshot.ManifestType != manifest.TypeURL {
		t.Fatalf("snapshot.ManifestType %q != manifest.TypeURL %q", snapshot.ManifestType, manifest.TypeURL)
	}
	if last := snapshot.PushOrder[len(snapshot.PushOrder)-1]; last != manifest.TypeURL {
		t.Fatalf("last pushed type is %q, want the manifest", last)
	}
}

// TestSharedContentPerNodeBinding: one content part serves every node of a scope;
// each node accepts only its own binding, and a binding to another scope is refused.
func TestSharedContentPerNodeBinding(t *testing.T) {
	priv := key(t, 4)
	pub := priv.Public().(ed25519.PublicKey)
	snap := testSnap(t)
	content, err := Content(priv, "scope-a", snap, issued, time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name, node, scope, verifyAs string
		want                        error
	}{
		{"first node", "n1", "scope-a", "n1", nil},
		{"second node, same content", "n2", "scope-a", "n2", nil},
		{"binding of another node", "n1", "scope-a", "n2", manifest.ErrNode},
		{"binding to another scope", "n1", "scope-b", "n1", manifest.ErrScope},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			b, err := Binding(priv, tc.node, tc.scope, Stream{Current: tc.node == "n2", Revision: 3}, issued, 2*time.Hour)
			if err != nil {
				t.Fatal(err)
			}
			r, err := Resource(content, b)
			if err != nil {
				t.Fatal(err)
			}
			var sm manifestpb.SignedManifest
			if err := proto.Unmarshal(r.Any.GetValue(), &sm); err != nil {
				t.Fatal(err)
			}
			if n := len(r.Any.GetValue()); n > 400 {
				t.Errorf("manifest resource is %d bytes, want a few hundred", n)
			}
			m, err := manifest.Verify(pub, &sm, tc.verifyAs, issued.Add(time.Minute))
			if !errors.Is(err, tc.want) || (tc.want == nil && err != nil) {
				t.Fatalf("err = %v, want %v", err, tc.want)
			}
			if err == nil {
				if !m.ValidUntil.Equal(issued.Add(time.Hour)) {
					t.Errorf("valid until %v, want the content's (the earlier)", m.ValidUntil)
				}
				if err := m.Match(hashes(snap)); err != nil {
					t.Errorf("Match: %v", err)
				}
				if m.Current != (tc.node == "n2") || m.StreamRevision != 3 {
					t.Errorf("binding says current=%v at stream revision %d, want %v at 3", m.Current, m.StreamRevision, tc.node == "n2")
				}
			}
		})
	}
	if _, err := Binding(priv, "", "s", Stream{}, issued, 0); err == nil || err.Error() != "sign manifest binding: node id: required" {
		t.Fatalf("binding without node: %v", err)
	}
	if _, err := Binding(priv, "n", "", Stream{}, issued, 0); err == nil || err.Error() != "sign manifest binding for n: scope: required" {
		t.Fatalf("binding without scope: %v", err)
	}
}

// TestPublisherChain: a publisher with a certificate from the mesh CA signs
// manifests a sidecar trusting only the CA bundle accepts; the ROOTCA Secret's
// hash is committed apart in the content.
func TestPublisherChain(t *testing.T) {
	if snapshot.SecretType != manifest.SecretTypeURL {
		t.Fatalf("snapshot.SecretType %q, manifest.SecretTypeURL %q", snapshot.SecretType, manifest.SecretTypeURL)
	}
	c, err := ca.Open(ca.Config{Dir: t.TempDir(), TrustDomain: "cluster.local"})
	if err != nil {
		t.Fatal(err)
	}
	id, err := spiffe.Publisher("cluster.local")
	if err != nil {
		t.Fatal(err)
	}
	priv := key(t, 3)
	chain, err := c.SignKey(priv.Public(), id, nil, nil, time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	snap, err := snapshot.New(7, map[string]map[string]proto.Message{
		snapshot.ClusterType: {"a": wrapperspb.String("cluster a")},
		snapshot.SecretType:  {manifest.RootCAName: wrapperspb.String("bundle and CRL")},
	})
	if err != nil {
		t.Fatal(err)
	}
	r, err := Publisher{Key: priv, Chain: chain}.Manifest("node-1", snap, time.Now(), time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	var sm manifestpb.SignedManifest
	if err := r.Any.UnmarshalTo(&sm); err != nil {
		t.Fatal(err)
	}
	m, err := manifest.Trust{Roots: c.Bundle(), TrustDomain: "cluster.local"}.Verify(&sm, "node-1", time.Now())
	if err != nil {
		t.Fatal(err)
	}
	want := manifest.Hash(snap.Resources[snapshot.SecretType][manifest.RootCAName].Any.GetValue())
	if !m.HasRootCA || m.RootCA != want {
		t.Fatalf("root CA hash %x (%v), want %x", m.RootCA, m.HasRootCA, want)
	}
	if err := m.Match(hashes(snap), manifest.TypeURL); err != nil {
		t.Fatal(err)
	}
	// A chain whose key is not the signing key is refused when assembling.
	if _, err := (Publisher{Key: key(t, 4), Chain: chain}).Manifest("node-1", snap, time.Now(), time.Hour); err == nil || !strings.Contains(err.Error(), "holds key") {
		t.Fatalf("mismatched chain: %v", err)
	}
}
