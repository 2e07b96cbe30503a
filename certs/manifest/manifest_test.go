package manifest

import (
	"crypto/ed25519"
	"crypto/rand"
	"crypto/sha256"
	"encoding/binary"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/weft-mesh/weft/certs/manifest/manifestpb"
	"go.uber.org/goleak"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/timestamppb"
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

var sampleEntries = []Entry{
	{TypeURL: "t/listener", Name: "outbound", SHA256: Hash([]byte("l"))},
	{TypeURL: "t/cluster", Name: "c1", SHA256: Hash([]byte("c1"))},
}

func sampleHave() map[string]map[string][32]byte {
	return map[string]map[string][32]byte{
		"t/listener": {"outbound": Hash([]byte("l"))},
		"t/cluster":  {"c1": Hash([]byte("c1"))},
	}
}

func sampleContent(t testing.TB, scope string) Content {
	d, err := Digest(sampleEntries)
	if err != nil {
		t.Fatal(err)
	}
	return Content{Scope: scope, Revision: 7, Digest: d, Count: len(sampleEntries), IssuedAt: t0, ValidUntil: t0.Add(24 * time.Hour)}
}

// signed assembles a manifest from a content and a binding signed by priv.
func signed(t testing.TB, priv ed25519.PrivateKey, c Content, b Binding) *manifestpb.SignedManifest {
	t.Helper()
	sc, err := SignContent(priv, c)
	if err != nil {
		t.Fatal(err)
	}
	sb, err := SignBinding(priv, b)
	if err != nil {
		t.Fatal(err)
	}
	sm, err := Assemble(sc, sb)
	if err != nil {
		t.Fatal(err)
	}
	return sm
}

func binding(node, scope string) Binding {
	return Binding{NodeID: node, Scope: scope, IssuedAt: t0, ValidUntil: t0.Add(24 * time.Hour), Current: true, StreamRevision: 7}
}

func TestSignVerifyRoundTrip(t *testing.T) {
	priv := newKey(t)
	sm := signed(t, priv, sampleContent(t, "shop/reviews"), binding("reviews-1", "shop/reviews"))
	if n := proto.Size(sm); n > 400 {
		t.Errorf("manifest is %d bytes, want a few hundred at most", n)
	}
	m, err := Verify(priv.Public().(ed25519.PublicKey), sm, "reviews-1", t0.Add(time.Hour))
	if err != nil {
		t.Fatal(err)
	}
	want := Manifest{NodeID: "reviews-1", Scope: "shop/reviews", Revision: 7, Digest: sampleContent(t, "x").Digest, Count: 2,
		IssuedAt: t0, BindingIssuedAt: t0, ValidUntil: t0.Add(24 * time.Hour), KeyID: KeyID(priv.Public().(ed25519.PublicKey)),
		Current: true, StreamRevision: 7}
	if *m != want {
		t.Fatalf("decoded %+v\nwant    %+v", *m, want)
	}
	// A binding pilot signed on a wait timeout says so, and where the stream began.
	b := binding("reviews-1", "shop/reviews")
	b.Current, b.StreamRevision = false, 9
	m, err = Verify(priv.Public().(ed25519.PublicKey), signed(t, priv, sampleContent(t, "shop/reviews"), b), "reviews-1", t0.Add(time.Hour))
	if err != nil || m.Current || m.StreamRevision != 9 {
		t.Fatalf("not-current binding decoded as %+v, %v; want current=false, stream revision 9", m, err)
	}
	if err := m.Match(sampleHave()); err != nil {
		t.Fatalf("match: %v", err)
	}
}

// TestValidityIsTheEarlierPart: the manifest is valid from the later issue time
// to the earlier valid-until of its two parts.
func TestValidityIsTheEarlierPart(t *testing.T) {
	priv := newKey(t)
	pub := priv.Public().(ed25519.PublicKey)
	c := sampleContent(t, "s")
	b := binding("n", "s")
	b.IssuedAt, b.ValidUntil = t0.Add(2*time.Hour), t0.Add(3*time.Hour)
	sm := signed(t, priv, c, b)
	tests := []struct {
		name string
		now  time.Time
		want error
	}{
		{"before the binding's issue minus skew", t0.Add(2*time.Hour - maxClockSkew - time.Second), ErrNotYet},
		{"within skew of the binding's issue", t0.Add(2*time.Hour - maxClockSkew), nil},
		{"inside both", t0.Add(150 * time.Minute), nil},
		{"at the binding's valid-until", t0.Add(3 * time.Hour), ErrExpired},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			m, err := Verify(pub, sm, "n", tc.now)
			if !errors.Is(err, tc.want) || (tc.want == nil && err != nil) {
				t.Fatalf("err = %v, want %v", err, tc.want)
			}
			if err == nil && !m.ValidUntil.Equal(t0.Add(3*time.Hour)) {
				t.Fatalf("valid until %v, want the binding's", m.ValidUntil)
			}
		})
	}
}

func TestVerifyRefusals(t *testing.T) {
	priv := newKey(t)
	pub := priv.Public().(ed25519.PublicKey)
	other := newKey(t)
	content := sampleContent(t, "shop/reviews")
	good := signed(t, priv, content, binding("reviews-1", "shop/reviews"))
	clone := func(f func(sm *manifestpb.SignedManifest)) *manifestpb.SignedManifest {
		sm := proto.Clone(good).(*manifestpb.SignedManifest)
		f(sm)
		return sm
	}
	expiredContent := content
	expiredContent.IssuedAt, expiredContent.ValidUntil = t0.Add(-2*time.Hour), t0.Add(-time.Hour)
	expiredBinding := binding("reviews-1", "shop/reviews")
	expiredBinding.IssuedAt, expiredBinding.ValidUntil = t0.Add(-2*time.Hour), t0.Add(-time.Hour)
	futureContent := content
	futureContent.IssuedAt, futureContent.ValidUntil = t0.Add(time.Hour), t0.Add(25*time.Hour)
	futureBinding := binding("reviews-1", "shop/reviews")
	futureBinding.IssuedAt, futureBinding.ValidUntil = t0.Add(time.Hour), t0.Add(25*time.Hour)
	// A part signed by the right key whose fields are broken (a signer bug).
	badDigest, err := signPart(priv, contentContext, &manifestpb.Content{Scope: "shop/reviews", Digest: []byte{1, 2, 3},
		IssuedAt: timestamppb.New(t0), ValidUntil: timestamppb.New(t0.Add(time.Hour))})
	if err != nil {
		t.Fatal(err)
	}
	noTimes, err := signPart(priv, bindingContext, &manifestpb.Binding{NodeId: "reviews-1", Scope: "shop/reviews"})
	if err != nil {
		t.Fatal(err)
	}
	negRev, err := signPart(priv, bindingContext, &manifestpb.Binding{NodeId: "reviews-1", Scope: "shop/reviews",
		IssuedAt: timestamppb.New(t0), ValidUntil: timestamppb.New(t0.Add(time.Hour)), StreamRevision: -1})
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name    string
		sm      *manifestpb.SignedManifest
		node    string
		want    error
		wantMsg string // exact error text, when the table pins it
	}{
		{"nil", nil, "reviews-1", ErrMalformed, "manifest malformed: empty"},
		{"no content", clone(func(sm *manifestpb.SignedManifest) { sm.Content = nil }), "reviews-1", ErrMalformed, "manifest malformed: content: empty"},
		{"no binding signature", clone(func(sm *manifestpb.SignedManifest) { sm.BindingSignature = nil }), "reviews-1", ErrMalformed, "manifest malformed: binding: empty"},
		{"oversized", clone(func(sm *manifestpb.SignedManifest) { sm.Binding = make([]byte, MaxBytes) }), "reviews-1", ErrMalformed, ""},
		{"other publisher", signed(t, other, content, binding("reviews-1", "shop/reviews")), "reviews-1", ErrKey, ""},
		{"key id relabelled", clone(func(sm *manifestpb.SignedManifest) { sm.KeyId = KeyID(other.Public().(ed25519.PublicKey)) }), "reviews-1", ErrKey, ""},
		{"one content byte altered", clone(func(sm *manifestpb.SignedManifest) { sm.Content[len(sm.Content)/2] ^= 1 }), "reviews-1", ErrSignature, "manifest signature invalid: content"},
		{"one binding byte altered", clone(func(sm *manifestpb.SignedManifest) { sm.Binding[len(sm.Binding)/2] ^= 1 }), "reviews-1", ErrSignature, "manifest signature invalid: binding"},
		{"content signature altered", clone(func(sm *manifestpb.SignedManifest) { sm.ContentSignature[0] ^= 1 }), "reviews-1", ErrSignature, ""},
		{"parts swapped", clone(func(sm *manifestpb.SignedManifest) {
			sm.Content, sm.Binding = sm.Binding, sm.Content
			sm.ContentSignature, sm.BindingSignature = sm.BindingSignature, sm.ContentSignature
		}), "reviews-1", ErrSignature, ""},
		{"signed content with a short digest", clone(func(sm *manifestpb.SignedManifest) {
			sm.Content, sm.ContentSignature = badDigest.Body, badDigest.Signature
		}),
			"reviews-1", ErrMalformed, "manifest malformed: content.digest: 3 bytes, want 32"},
		{"signed binding without times", clone(func(sm *manifestpb.SignedManifest) { sm.Binding, sm.BindingSignature = noTimes.Body, noTimes.Signature }),
			"reviews-1", ErrMalformed, "manifest malformed: binding: issued_at and valid_until required"},
		{"signed binding with a negative stream revision", clone(func(sm *manifestpb.SignedManifest) { sm.Binding, sm.BindingSignature = negRev.Body, negRev.Signature }),
			"reviews-1", ErrMalformed, "manifest malformed: binding.stream_revision -1 is negative"},
		{"other node", good, "ratings-1", ErrNode, `manifest is for another node: manifest node "reviews-1", this node is "ratings-1"`},
		{"binding for another scope", signed(t, priv, content, binding("reviews-1", "shop/ratings")), "reviews-1", ErrScope,
			`manifest binding and content name different scopes: binding scope "shop/ratings", content scope "shop/reviews"`},
		{"content expired", signed(t, priv, expiredContent, binding("reviews-1", "shop/reviews")), "reviews-1", ErrExpired, ""},
		{"binding expired", signed(t, priv, content, expiredBinding), "reviews-1", ErrExpired, ""},
		{"content issued in the future", signed(t, priv, futureContent, binding("reviews-1", "shop/reviews")), "reviews-1", ErrNotYet, ""},
		{"binding issued in the future", signed(t, priv, content, futureBinding), "reviews-1", ErrNotYet, ""},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			_, err := Verify(pub, tc.sm, tc.node, t0)
			if !errors.Is(err, tc.want) {
				t.Fatalf("err = %v, want %v", err, tc.want)
			}
			if tc.wantMsg != "" && err.Error() != tc.wantMsg {
				t.Fatalf("err = %q, want %q", err, tc.wantMsg)
			}
		})
	}
	// The sentinels are distinct: no refusal can be mistaken for another.
	all := []error{ErrMalformed, ErrKey, ErrSignature, ErrNode, ErrScope, ErrExpired, ErrNotYet, ErrMismatch}
	for i, a := range all {
		for j, b := range all {
			if i != j && errors.Is(a, b) {
				t.Errorf("%v is %v", a, b)
			}
		}
	}
}

func TestSignRejects(t *testing.T) {
	priv := newKey(t)
	noScope := sampleContent(t, "")
	empty := sampleContent(t, "s")
	empty.ValidUntil = empty.IssuedAt
	negative := sampleContent(t, "s")
	negative.Count = -1
	longID := strings.Repeat("x", MaxIDBytes+1)
	tests := []struct {
		name string
		sign func() error
		want string
	}{
		{"content without scope", func() error { _, err := SignContent(priv, noScope); return err }, "sign manifest content: scope: required"},
		{"content with empty validity", func() error { _, err := SignContent(priv, empty); return err },
			`sign manifest content "s": valid_until 2026-11-29 12:00:00 +0000 UTC not after issued_at 2026-11-29 12:00:00 +0000 UTC`},
		{"content with negative count", func() error { _, err := SignContent(priv, negative); return err }, `sign manifest content for scope "s": count -1 is negative`},
		{"binding without node", func() error { _, err := SignBinding(priv, binding("", "s")); return err }, "sign manifest binding: node id: required"},
		{"binding without scope", func() error { _, err := SignBinding(priv, binding("n", "")); return err }, "sign manifest binding for n: scope: required"},
		{"binding with a long node id", func() error { _, err := SignBinding(priv, binding(longID, "s")); return err }, "sign manifest binding: node id: 1025 bytes exceeds 1024"},
		{"short private key", func() error { _, err := SignBinding(priv[:10], binding("n", "s")); return err }, "sign manifest: private key: 10 bytes, want 64"},
		{"binding with a negative stream revision", func() error {
			b := binding("n", "s")
			b.StreamRevision = -1
			_, err := SignBinding(priv, b)
			return err
		}, "sign manifest binding for n: stream revision -1 is negative"},
		{"parts of two keys", func() error {
			c, _ := SignContent(priv, sampleContent(t, "s"))
			b, _ := SignBinding(newKey(t), binding("n", "s"))
			_, err := Assemble(c, b)
			return err
		}, "assemble manifest: content signed by key "},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			err := tc.sign()
			if err == nil || !strings.HasPrefix(err.Error(), tc.want) || (!strings.HasSuffix(tc.want, " ") && err.Error() != tc.want) {
				t.Fatalf("err = %v, want %s", err, tc.want)
			}
		})
	}
}

// TestDigestEncoding pins the encoding documented on Digest, byte for byte.
func TestDigestEncoding(t *testing.T) {
	h := sha256.New()
	h.Write([]byte("weft-manifest-digest-v2\x00"))
	for _, e := range []Entry{sampleEntries[1], sampleEntries[0]} { // sorted: t/cluster < t/listener
		var n [4]byte
		binary.BigEndian.PutUint32(n[:], uint32(len(e.TypeURL)))
		h.Write(n[:])
		h.Write([]byte(e.TypeURL))
		binary.BigEndian.PutUint32(n[:], uint32(len(e.Name)))
		h.Write(n[:])
		h.Write([]byte(e.Name))
		h.Write(e.SHA256[:])
	}
	var want [32]byte
	h.Sum(want[:0])
	got, err := Digest(sampleEntries)
	if err != nil || got != want {
		t.Fatalf("Digest = %x, %v; want %x", got, err, want)
	}
	if d, n := DigestOf(sampleHave()); d != want || n != 2 {
		t.Fatalf("DigestOf = %x, %d; want %x, 2", d, n, want)
	}

	ab := []Entry{{TypeURL: "t", Name: "ab"}, {TypeURL: "t", Name: "c"}}
	abc := []Entry{{TypeURL: "t", Name: "a"}, {TypeURL: "t", Name: "bc"}}
	if d1, _ := Digest(ab); d1 == func() [32]byte { d, _ := Digest(abc); return d }() {
		t.Fatal("names split differently digest equal: the encoding is ambiguous")
	}
	if d1, _ := Digest([]Entry{{TypeURL: "t1", Name: "x"}}); d1 == func() [32]byte { d, _ := Digest([]Entry{{TypeURL: "t", Name: "1x"}}); return d }() {
		t.Fatal("type/name boundary moved digests equal")
	}
	if _, err := Digest(append(sampleEntries[:1:1], sampleEntries[0])); err == nil || err.Error() != `manifest digest: duplicate resource t/listener "outbound"` {
		t.Fatalf("duplicate: err = %v", err)
	}
}

func TestMatch(t *testing.T) {
	priv := newKey(t)
	sm := signed(t, priv, sampleContent(t, "s"), binding("n", "s"))
	m, err := Verify(priv.Public().(ed25519.PublicKey), sm, "n", t0)
	if err != nil {
		t.Fatal(err)
	}
	withManifest := sampleHave()
	withManifest[TypeURL] = map[string][32]byte{Name: Hash([]byte("whatever"))}
	if err := m.Match(withManifest, TypeURL); err != nil {
		t.Fatalf("match ignoring the manifest's own type: %v", err)
	}
	tests := []struct {
		name string
		edit func(map[string]map[string][32]byte)
	}{
		{"missing", func(h map[string]map[string][32]byte) { delete(h, "t/cluster") }},
		{"changed", func(h map[string]map[string][32]byte) { h["t/listener"]["outbound"] = Hash([]byte("L")) }},
		{"extra", func(h map[string]map[string][32]byte) { h["t/cluster"]["c2"] = Hash(nil) }},
		{"renamed", func(h map[string]map[string][32]byte) { h["t/cluster"] = map[string][32]byte{"c9": Hash([]byte("c1"))} }},
		{"moved to another type", func(h map[string]map[string][32]byte) {
			h["t/route"] = h["t/cluster"]
			delete(h, "t/cluster")
		}},
		{"manifest type not ignored", func(h map[string]map[string][32]byte) { h[TypeURL] = map[string][32]byte{Name: {}} }},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			have := sampleHave()
			tc.edit(have)
			err := m.Match(have)
			if !errors.Is(err, ErrMismatch) {
				t.Fatalf("err = %v, want %v", err, ErrMismatch)
			}
		})
	}
	// Equal digest, different count: a signer bug, still refused.
	bad := *m
	bad.Count = 3
	if err := bad.Match(sampleHave()); err == nil || err.Error() != "resources do not match manifest digest: 2 resources, manifest says 3" {
		t.Fatalf("count: err = %v", err)
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

// FuzzVerify feeds arbitrary bytes as a persisted/wire SignedManifest: Decode and
// Verify must never panic and never accept anything not signed by the trusted key
// for this node.
func FuzzVerify(f *testing.F) {
	priv := ed25519.NewKeyFromSeed(make([]byte, ed25519.SeedSize))
	pub := priv.Public().(ed25519.PublicKey)
	good := signed(f, priv, sampleContent(f, "shop/reviews"), binding("reviews-1", "shop/reviews"))
	b, _ := proto.Marshal(good)
	f.Add(b)
	f.Add([]byte{})
	f.Fuzz(func(t *testing.T, data []byte) {
		sm, err := Decode(data)
		if err != nil {
			if !errors.Is(err, ErrMalformed) {
				t.Fatalf("decode error %v is not ErrMalformed", err)
			}
			return
		}
		m, err := Verify(pub, sm, "reviews-1", t0.Add(time.Hour))
		if err != nil {
			return
		}
		if !ed25519.Verify(pub, withContext(contentContext, sm.GetContent()), sm.GetContentSignature()) ||
			!ed25519.Verify(pub, withContext(bindingContext, sm.GetBinding()), sm.GetBindingSignature()) || m.NodeID != "reviews-1" {
			t.Fatalf("accepted a manifest that does not verify: %+v", m)
		}
	})
}

func TestDecodeLimits(t *testing.T) {
	tests := []struct {
		name string
		b    []byte
		want string
	}{
		{"over MaxBytes", make([]byte, MaxBytes+1), "manifest malformed: 16385 bytes exceeds 16384"},
		{"not protobuf", []byte{0xff, 0xff}, "manifest malformed: "},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			_, err := Decode(tc.b)
			if !errors.Is(err, ErrMalformed) || !strings.HasPrefix(err.Error(), tc.want) {
				t.Fatalf("err = %v, want %s", err, tc.want)
			}
		})
	}
	if sm, err := Decode(nil); err != nil || sm == nil {
		t.Fatalf("empty input decodes to an empty manifest (Verify refuses it): %v %v", sm, err)
	}
}
