package manifest

import (
	"crypto/ed25519"
	"crypto/rand"
	"errors"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/weft-mesh/weft/certs/manifest/manifestpb"
	"go.uber.org/goleak"
	"google.golang.org/protobuf/proto"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

var t0 = time.Date(2026, 11, 29, 12, 0, 0, 0, time.UTC)

func newKey(t testing.TB) ed25519.PrivateKey {
	_, priv, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	return priv
}

func sample() Manifest {
	return Manifest{
		NodeID:   "reviews-1",
		Revision: 7,
		Resources: []Entry{
			{TypeURL: "t/listener", Name: "outbound", SHA256: Hash([]byte("l"))},
			{TypeURL: "t/cluster", Name: "c1", SHA256: Hash([]byte("c1"))},
		},
		IssuedAt:   t0,
		ValidUntil: t0.Add(24 * time.Hour),
	}
}

func TestSignVerifyRoundTrip(t *testing.T) {
	priv := newKey(t)
	sm, err := Sign(priv, sample())
	if err != nil {
		t.Fatal(err)
	}
	m, err := Verify(priv.Public().(ed25519.PublicKey), sm, "reviews-1", t0.Add(time.Hour))
	if err != nil {
		t.Fatal(err)
	}
	if m.Revision != 7 || m.NodeID != "reviews-1" || len(m.Resources) != 2 || m.Resources[0].TypeURL != "t/cluster" {
		t.Fatalf("decoded %+v", m)
	}
	if !m.ValidUntil.Equal(t0.Add(24 * time.Hour)) {
		t.Fatalf("valid until %v", m.ValidUntil)
	}
}

func TestVerifyRefusals(t *testing.T) {
	priv := newKey(t)
	pub := priv.Public().(ed25519.PublicKey)
	other := newKey(t)
	good, err := Sign(priv, sample())
	if err != nil {
		t.Fatal(err)
	}
	foreignKey, _ := Sign(other, sample())
	flipped := proto.Clone(good).(*manifestpb.SignedManifest)
	flipped.Manifest[len(flipped.Manifest)/2] ^= 1
	badSig := proto.Clone(good).(*manifestpb.SignedManifest)
	badSig.Signature[0] ^= 1
	tests := []struct {
		name string
		sm   *manifestpb.SignedManifest
		node string
		now  time.Time
		want error
	}{
		{"nil", nil, "reviews-1", t0, ErrMalformed},
		{"other publisher", foreignKey, "reviews-1", t0, ErrKey},
		{"one byte altered", flipped, "reviews-1", t0, ErrSignature},
		{"signature altered", badSig, "reviews-1", t0, ErrSignature},
		{"other node", good, "ratings-1", t0, ErrNode},
		{"expired exactly at valid_until", good, "reviews-1", t0.Add(24 * time.Hour), ErrExpired},
		{"issued in the future", good, "reviews-1", t0.Add(-time.Hour), ErrNotYet},
		{"within skew", good, "reviews-1", t0.Add(-time.Minute), nil},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			_, err := Verify(pub, tc.sm, tc.node, tc.now)
			if !errors.Is(err, tc.want) || (tc.want == nil && err != nil) {
				t.Fatalf("err = %v, want %v", err, tc.want)
			}
		})
	}
}

func TestSignRejects(t *testing.T) {
	priv := newKey(t)
	m := sample()
	m.NodeID = ""
	if _, err := Sign(priv, m); err == nil || err.Error() != "sign manifest: node id: required" {
		t.Fatalf("err = %v", err)
	}
	m = sample()
	m.ValidUntil = m.IssuedAt
	if _, err := Sign(priv, m); err == nil {
		t.Fatal("want error for empty validity window")
	}
	m = sample()
	m.Resources = append(m.Resources, m.Resources[0])
	if _, err := Sign(priv, m); err == nil || err.Error() != `sign manifest for reviews-1: duplicate resource t/listener "outbound"` {
		t.Fatalf("err = %v", err)
	}
}

func TestMatch(t *testing.T) {
	m := sample()
	sortEntries(m.Resources)
	full := map[string]map[string][32]byte{
		"t/listener": {"outbound": Hash([]byte("l"))},
		"t/cluster":  {"c1": Hash([]byte("c1"))},
		TypeURL:      {Name: Hash([]byte("whatever"))},
	}
	if err := m.Match(full, TypeURL); err != nil {
		t.Fatalf("match: %v", err)
	}
	tests := []struct {
		name string
		have map[string]map[string][32]byte
		want string
	}{
		{"missing", map[string]map[string][32]byte{"t/listener": {"outbound": Hash([]byte("l"))}},
			`resources do not match manifest: t/cluster "c1" missing`},
		{"changed", map[string]map[string][32]byte{"t/listener": {"outbound": Hash([]byte("L"))}, "t/cluster": {"c1": Hash([]byte("c1"))}},
			`resources do not match manifest: t/listener "outbound" content hash differs`},
		{"extra", map[string]map[string][32]byte{"t/listener": {"outbound": Hash([]byte("l"))}, "t/cluster": {"c1": Hash([]byte("c1")), "c2": Hash(nil)}},
			`resources do not match manifest: t/cluster "c2" not in manifest`},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			err := m.Match(tc.have, TypeURL)
			if err == nil || err.Error() != tc.want || !errors.Is(err, ErrMismatch) {
				t.Fatalf("err = %v, want %s", err, tc.want)
			}
		})
	}
}

func TestKeysCreateReloadAndPublicFile(t *testing.T) {
	dir := t.TempDir()
	k1, err := LoadOrCreateKey(dir)
	if err != nil {
		t.Fatal(err)
	}
	k2, err := LoadOrCreateKey(dir)
	if err != nil {
		t.Fatal(err)
	}
	if !k1.Equal(k2) {
		t.Fatal("reload returned a different key")
	}
	pub, err := LoadPublicKey(filepath.Join(dir, PublicKeyFile))
	if err != nil {
		t.Fatal(err)
	}
	if !pub.Equal(k1.Public()) {
		t.Fatal("publisher.pub does not hold the public half")
	}
	st, _ := os.Stat(filepath.Join(dir, PrivateKeyFile))
	if st.Mode().Perm() != 0o600 {
		t.Fatalf("private key mode %v", st.Mode().Perm())
	}
	if err := os.WriteFile(filepath.Join(dir, "junk.pub"), []byte("not pem"), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := LoadPublicKey(filepath.Join(dir, "junk.pub")); err == nil {
		t.Fatal("want error for junk key file")
	}
}

// FuzzVerify feeds arbitrary bytes as a persisted/wire SignedManifest: Verify must
// never panic and never accept anything not signed by the trusted key.
func FuzzVerify(f *testing.F) {
	priv := ed25519.NewKeyFromSeed(make([]byte, ed25519.SeedSize))
	pub := priv.Public().(ed25519.PublicKey)
	good, err := Sign(priv, sample())
	if err != nil {
		f.Fatal(err)
	}
	b, _ := proto.Marshal(good)
	f.Add(b)
	f.Add([]byte{})
	f.Fuzz(func(t *testing.T, data []byte) {
		var sm manifestpb.SignedManifest
		if proto.Unmarshal(data, &sm) != nil {
			return
		}
		m, err := Verify(pub, &sm, "reviews-1", t0.Add(time.Hour))
		if err != nil {
			return
		}
		if !ed25519.Verify(pub, sm.GetManifest(), sm.GetSignature()) || m.NodeID != "reviews-1" {
			t.Fatalf("accepted a manifest that does not verify: %+v", m)
		}
	})
}
