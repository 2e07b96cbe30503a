package lkg

import (
	"crypto/ed25519"
	"errors"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/weft-mesh/weft/certs/manifest"
	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

var t0 = time.Date(2026, 11, 29, 12, 0, 0, 0, time.UTC)

func fixture(t testing.TB, node string) (ed25519.PrivateKey, *Snapshot) {
	return fixtureScoped(t, node, "shop/reviews", "shop/reviews")
}

// fixtureScoped signs the fixture's content for contentScope and binds node to
// bindScope, as pilot does in two parts.
func fixtureScoped(t testing.TB, node, contentScope, bindScope string) (ed25519.PrivateKey, *Snapshot) {
	t.Helper()
	priv := ed25519.NewKeyFromSeed(make([]byte, ed25519.SeedSize))
	res := []Resource{
		{TypeURL: "t/cluster", Name: "outbound|9080||reviews.shop.svc.cluster.local", Version: "v1", Value: []byte("cluster-bytes")},
		{TypeURL: "t/listener", Name: "outbound", Version: "v2", Value: []byte("listener-bytes")},
	}
	var entries []manifest.Entry
	for _, r := range res {
		entries = append(entries, manifest.Entry{TypeURL: r.TypeURL, Name: r.Name, SHA256: manifest.Hash(r.Value)})
	}
	d, err := manifest.Digest(entries)
	if err != nil {
		t.Fatal(err)
	}
	c, err := manifest.SignContent(priv, manifest.Content{Scope: contentScope, Revision: 12, Digest: d, Count: len(entries), IssuedAt: t0, ValidUntil: t0.Add(24 * time.Hour)})
	if err != nil {
		t.Fatal(err)
	}
	b, err := manifest.SignBinding(priv, manifest.Binding{NodeID: node, Scope: bindScope, IssuedAt: t0, ValidUntil: t0.Add(24 * time.Hour)})
	if err != nil {
		t.Fatal(err)
	}
	sm, err := manifest.Assemble(c, b)
	if err != nil {
		t.Fatal(err)
	}
	return priv, &Snapshot{NodeID: "reviews-1", Resources: res, Manifest: sm, LastConfirmed: t0.Add(10 * time.Minute)}
}

func TestSaveLoadRoundTrip(t *testing.T) {
	dir := t.TempDir()
	priv, s := fixture(t, "reviews-1")
	if err := Save(dir, s); err != nil {
		t.Fatal(err)
	}
	got, m, err := Load(dir, manifest.Trust{Pin: priv.Public().(ed25519.PublicKey)}, "reviews-1", t0.Add(time.Hour))
	if err != nil {
		t.Fatal(err)
	}
	if m.Revision != 12 || len(got.Resources) != 2 || !got.LastConfirmed.Equal(t0.Add(10*time.Minute)) {
		t.Fatalf("got %+v rev %d", got, m.Revision)
	}
	if string(got.Resources[1].Any().GetValue()) != "listener-bytes" {
		t.Fatalf("resource bytes lost: %q", got.Resources[1].Value)
	}
}

func TestLoadRefusals(t *testing.T) {
	priv, s := fixture(t, "reviews-1")
	pub := priv.Public().(ed25519.PublicKey)
	_, foreign := fixture(t, "ratings-1")
	_, otherScope := fixtureScoped(t, "reviews-1", "shop/reviews", "shop/ratings")
	extra := *s
	extra.Resources = append(append([]Resource(nil), s.Resources...), Resource{TypeURL: "t/route", Name: "r", Value: []byte("route")})
	tests := []struct {
		name    string
		snap    *Snapshot
		mutate  func(b []byte) []byte
		node    string
		now     time.Time
		want    error
		wantMsg string
	}{
		{name: "format 1 (per-entry manifest)", snap: s, node: "reviews-1", now: t0,
			mutate:  func(b []byte) []byte { return replaceOnce(t, b, `"format":2`, `"format":1`) },
			wantMsg: "last-known-good: format 1, want 2"},
		{name: "manifest bytes cut", snap: s, node: "reviews-1", now: t0, want: manifest.ErrMalformed,
			mutate: func(b []byte) []byte { return replaceOnce(t, b, `"manifest":"`, `"manifest":"AAAA`) }},
		{name: "bound to another scope", snap: otherScope, node: "reviews-1", now: t0, want: manifest.ErrScope},
		{name: "a resource added", snap: &extra, node: "reviews-1", now: t0, want: manifest.ErrMismatch},
		{name: "from another node", snap: foreign, node: "reviews-1", now: t0, want: manifest.ErrNode},
		{name: "past validity", snap: s, node: "reviews-1", now: t0.Add(25 * time.Hour), want: manifest.ErrExpired},
		{name: "resource byte altered", snap: s, node: "reviews-1", now: t0.Add(time.Hour), want: manifest.ErrMismatch,
			mutate: func(b []byte) []byte { return replaceOnce(t, b, "bGlzdGVuZXItYnl0ZXM=", "bGl6dGVuZXItYnl0ZXM=") }},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			if err := Save(dir, tc.snap); err != nil {
				t.Fatal(err)
			}
			if tc.mutate != nil {
				p := filepath.Join(dir, FileName)
				b, _ := os.ReadFile(p)
				if err := os.WriteFile(p, tc.mutate(b), 0o600); err != nil {
					t.Fatal(err)
				}
			}
			_, _, err := Load(dir, manifest.Trust{Pin: pub}, tc.node, tc.now)
			if err == nil || (tc.want != nil && !errors.Is(err, tc.want)) || (tc.wantMsg != "" && err.Error() != tc.wantMsg) {
				t.Fatalf("err = %v, want %v %q", err, tc.want, tc.wantMsg)
			}
		})
	}
}

// TestEveryByteFlipIsRefused alters each byte of the saved file in turn: every
// variant must be refused or, where the byte is insignificant JSON (whitespace has
// none here; the unsigned lastConfirmed and versions are), still verify the same
// resources. Nothing altered may load with different resource content.
func TestEveryByteFlipIsRefused(t *testing.T) {
	priv, s := fixture(t, "reviews-1")
	pub := priv.Public().(ed25519.PublicKey)
	dir := t.TempDir()
	if err := Save(dir, s); err != nil {
		t.Fatal(err)
	}
	orig, _ := os.ReadFile(filepath.Join(dir, FileName))
	for i := range orig {
		b := append([]byte(nil), orig...)
		b[i] ^= 0x01
		got, _, err := Decode(b, manifest.Trust{Pin: pub}, "reviews-1", t0.Add(time.Hour))
		if err != nil {
			continue
		}
		for j, r := range got.Resources {
			if string(r.Value) != string(s.Resources[j].Value) || r.Name != s.Resources[j].Name || r.TypeURL != s.Resources[j].TypeURL {
				t.Fatalf("byte %d flipped: loaded altered resource %+v", i, r)
			}
		}
	}
}

func TestNoSnapshot(t *testing.T) {
	_, _, err := Load(t.TempDir(), manifest.Trust{}, "x", t0)
	if !errors.Is(err, ErrNoSnapshot) {
		t.Fatalf("err = %v", err)
	}
}

func replaceOnce(t *testing.T, b []byte, old, new string) []byte {
	t.Helper()
	s := string(b)
	for i := 0; i+len(old) <= len(s); i++ {
		if s[i:i+len(old)] == old {
			return []byte(s[:i] + new + s[i+len(old):])
		}
	}
	t.Fatalf("%q not found in file", old)
	return nil
}

func FuzzDecode(f *testing.F) {
	priv := ed25519.NewKeyFromSeed(make([]byte, ed25519.SeedSize))
	f.Add([]byte(`{"format":2}`))
	_, good := fixture(f, "reviews-1")
	dir := f.TempDir()
	if err := Save(dir, good); err != nil {
		f.Fatal(err)
	}
	b, err := os.ReadFile(filepath.Join(dir, FileName))
	if err != nil {
		f.Fatal(err)
	}
	f.Add(b)
	f.Add([]byte(`{}`))
	f.Fuzz(func(t *testing.T, b []byte) {
		s, m, err := Decode(b, manifest.Trust{Pin: priv.Public().(ed25519.PublicKey)}, "reviews-1", t0)
		if err == nil && (s == nil || m == nil || m.NodeID != "reviews-1") {
			t.Fatalf("accepted without a verified manifest for this node")
		}
	})
}
