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

func fixture(t *testing.T, node string) (ed25519.PrivateKey, *Snapshot) {
	t.Helper()
	priv := ed25519.NewKeyFromSeed(make([]byte, ed25519.SeedSize))
	res := []Resource{
		{TypeURL: "t/cluster", Name: "outbound|9080||reviews.shop.svc.cluster.local", Version: "v1", Value: []byte("cluster-bytes")},
		{TypeURL: "t/listener", Name: "outbound", Version: "v2", Value: []byte("listener-bytes")},
	}
	m := manifest.Manifest{NodeID: node, Revision: 12, IssuedAt: t0, ValidUntil: t0.Add(24 * time.Hour)}
	for _, r := range res {
		m.Resources = append(m.Resources, manifest.Entry{TypeURL: r.TypeURL, Name: r.Name, SHA256: manifest.Hash(r.Value)})
	}
	sm, err := manifest.Sign(priv, m)
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
	got, m, err := Load(dir, priv.Public().(ed25519.PublicKey), "reviews-1", t0.Add(time.Hour))
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
	tests := []struct {
		name   string
		snap   *Snapshot
		mutate func(b []byte) []byte
		node   string
		now    time.Time
		want   error
	}{
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
			_, _, err := Load(dir, pub, tc.node, tc.now)
			if !errors.Is(err, tc.want) {
				t.Fatalf("err = %v, want %v", err, tc.want)
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
		got, _, err := Decode(b, pub, "reviews-1", t0.Add(time.Hour))
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
	_, _, err := Load(t.TempDir(), nil, "x", t0)
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
	f.Add([]byte(`{"format":1}`))
	f.Add([]byte(`{}`))
	f.Fuzz(func(t *testing.T, b []byte) {
		s, m, err := Decode(b, priv.Public().(ed25519.PublicKey), "reviews-1", t0)
		if err == nil && (s == nil || m == nil || m.NodeID != "reviews-1") {
			t.Fatalf("accepted without a verified manifest for this node")
		}
	})
}
