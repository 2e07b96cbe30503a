// Package manifest signs and verifies the manifest that makes a sidecar's snapshot,
// and its persisted last-known-good copy, trustworthy. Shared by pilot and sidecar,
// so it imports neither.
//
// A manifest has two parts, each signed with pilot's Ed25519 publisher key:
//   - a Content statement (scope, store revision, a Digest committing to every
//     resource's type URL, name and content hash, the entry count, validity),
//     signed once per scope snapshot and shared by every sidecar of the scope;
//   - a Binding (node id, scope, validity), signed per node and stream, that says
//     which scope's content that node may accept, and whether pilot confirms the
//     content it is sent with current for the stream (compiled from at least the
//     store revision when the stream opened): a sidecar reports ready only on
//     content pilot confirmed current (or on its verified last-known-good).
//
// The publisher is certified by the mesh CA: the manifest carries its chain (leaf
// first, SPIFFE ID spiffe://<trust domain>/weft/publisher, Ed25519 key), so
// publisher keys rotate, and each pilot replica may have its own, without
// touching sidecars. A sidecar trusts a publisher through its trust bundle
// (Trust.Roots); a pinned key (Trust.Pin, --publisher-key) must also match when
// given, and alone it still accepts a manifest without a chain (publishers before
// the CA).
//
// A sidecar accepts a candidate when the publisher is trusted, both signatures
// verify under its key, the binding names it, both parts name the same scope, now
// is inside both validity windows and the digest it recomputes over the candidate
// equals the content's. The per-entry list is not sent, so a manifest is a few
// hundred bytes plus the chain whatever the mesh size.
package manifest

//go:generate protoc --go_out=. --go_opt=paths=source_relative manifestpb/manifest.proto

import (
	"crypto/ed25519"
	"crypto/sha256"
	"crypto/x509"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"math"
	"sort"
	"time"

	"github.com/weft-mesh/weft/certs/bundle"
	"github.com/weft-mesh/weft/certs/manifest/manifestpb"
	"github.com/weft-mesh/weft/certs/revoke"
	"github.com/weft-mesh/weft/certs/spiffe"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/timestamppb"
)

// TypeURL is the xDS type URL of the signed manifest resource; Name its only name.
const (
	TypeURL = "type.googleapis.com/weft.manifest.v1.SignedManifest"
	Name    = "manifest"
)

// SecretTypeURL is the SDS Secret type; RootCAName names the Secret that carries
// the trust bundle and CRL (validation_context{trusted_ca, crl}). Content
// commits to its hash apart (Content.RootCA), so a sidecar can keep the bundle
// with the manifest that delivered it.
const (
	SecretTypeURL = "type.googleapis.com/envoy.extensions.transport_sockets.tls.v3.Secret"
	RootCAName    = "ROOTCA"
)

// Limits on what Sign produces and Decode/Verify accept.
const (
	// MaxBytes bounds an encoded SignedManifest from the wire or disk. A manifest
	// holds two short messages and two signatures; this leaves room for long
	// node ids and scopes, nothing more.
	MaxBytes = 16 << 10
	// MaxIDBytes bounds a node id and a scope.
	MaxIDBytes = 1024
	// MaxChainCerts bounds the publisher chain: the leaf and up to three
	// intermediates (a plugged-in CA under an enterprise root).
	MaxChainCerts = 4
	// MaxValidity bounds a part's validity window (valid_until - issued_at): a
	// persisted snapshot must not be trusted forever, whoever signed it.
	MaxValidity = 30 * 24 * time.Hour
)

// Each check that can refuse a manifest has its own sentinel so logs and tests say
// exactly which one failed.
var (
	ErrMalformed = errors.New("manifest malformed")
	ErrKey       = errors.New("manifest signed by another publisher key")
	ErrSignature = errors.New("manifest signature invalid")
	ErrNode      = errors.New("manifest is for another node")
	ErrScope     = errors.New("manifest binding and content name different scopes")
	ErrExpired   = errors.New("manifest past its validity")
	ErrNotYet    = errors.New("manifest not yet valid")
	ErrMismatch  = errors.New("resources do not match manifest digest")
	// ErrNoChain: the manifest carries no publisher chain and no key is pinned.
	ErrNoChain = errors.New("manifest carries no publisher certificate chain")
	// ErrChain: the publisher chain does not verify against the trust bundle.
	ErrChain = errors.New("publisher certificate chain not trusted")
	// ErrPublisherID: the publisher certificate is not the publisher's SPIFFE ID.
	ErrPublisherID = errors.New("publisher certificate has the wrong SPIFFE ID")
	// ErrPublisherExpired: the publisher certificate is past its NotAfter (or
	// before its NotBefore) at the time it is checked.
	ErrPublisherExpired = errors.New("publisher certificate outside its validity")
	// ErrPublisherRevoked: the CRL the sidecar holds lists the publisher
	// certificate's serial.
	ErrPublisherRevoked = errors.New("publisher certificate revoked")
)

// Domain-separation prefixes: a signature over one part can never pass as a
// signature over the other, nor over anything else signed with the key.
const (
	contentContext = "weft-manifest-content-v2\x00"
	bindingContext = "weft-manifest-binding-v2\x00"
	digestContext  = "weft-manifest-digest-v2\x00"
)

// Entry is one resource a digest covers.
type Entry struct {
	TypeURL string
	Name    string
	SHA256  [32]byte // of the resource's Any.value bytes as sent
}

// Hash is the content hash an entry records for a resource's Any.value.
func Hash(anyValue []byte) [32]byte { return sha256.Sum256(anyValue) }

// Digest commits to a set of entries. The encoding, over the entries sorted by
// type URL then name (byte-wise), is:
//
//	sha256( "weft-manifest-digest-v2\x00" ||
//	        for each entry: u32be(len(type URL)) || type URL ||
//	                        u32be(len(name)) || name || sha256(Any.value) )
//
// Lengths make the encoding unambiguous whatever bytes names hold. Two entries
// with the same type URL and name are an error (a set cannot hold them).
func Digest(entries []Entry) ([32]byte, error) {
	es := append([]Entry(nil), entries...)
	sort.Slice(es, func(i, j int) bool {
		if es[i].TypeURL != es[j].TypeURL {
			return es[i].TypeURL < es[j].TypeURL
		}
		return es[i].Name < es[j].Name
	})
	h := sha256.New()
	h.Write([]byte(digestContext))
	var n [4]byte
	for i, e := range es {
		if i > 0 && es[i-1].TypeURL == e.TypeURL && es[i-1].Name == e.Name {
			return [32]byte{}, fmt.Errorf("manifest digest: duplicate resource %s %q", e.TypeURL, e.Name)
		}
		if len(e.TypeURL) > math.MaxUint32 || len(e.Name) > math.MaxUint32 {
			return [32]byte{}, fmt.Errorf("manifest digest: %s %q: name too long", e.TypeURL, e.Name)
		}
		binary.BigEndian.PutUint32(n[:], uint32(len(e.TypeURL)))
		h.Write(n[:])
		h.Write([]byte(e.TypeURL))
		binary.BigEndian.PutUint32(n[:], uint32(len(e.Name)))
		h.Write(n[:])
		h.Write([]byte(e.Name))
		h.Write(e.SHA256[:])
	}
	var d [32]byte
	h.Sum(d[:0])
	return d, nil
}

// DigestOf is Digest over have (type URL -> name -> sha256 of Any.value), skipping
// the types in ignore (e.g. the manifest's own type). It returns the entry count.
func DigestOf(have map[string]map[string][32]byte, ignore ...string) ([32]byte, int) {
	var es []Entry
	for typ, byName := range have {
		if contains(ignore, typ) {
			continue
		}
		for name, h := range byName {
			es = append(es, Entry{TypeURL: typ, Name: name, SHA256: h})
		}
	}
	d, err := Digest(es)
	if err != nil {
		// Map keys are unique and lengths fit: cannot happen.
		panic(err)
	}
	return d, len(es)
}

func contains(ss []string, s string) bool {
	for _, x := range ss {
		if x == s {
			return true
		}
	}
	return false
}

// Content is the statement shared by every sidecar of one scope.
type Content struct {
	Scope      string
	Revision   int64
	Digest     [32]byte
	Count      int
	IssuedAt   time.Time
	ValidUntil time.Time
	// RootCA is Hash of the SDS Secret ROOTCA's Any.value when the scope's
	// snapshot has one (HasRootCA); the digest covers it as well.
	RootCA    [32]byte
	HasRootCA bool
	// RollbackEpoch goes up on a deliberate store regression (pilot
	// --accept-store-regression): content with a lower revision than a
	// sidecar runs is accepted only with a higher epoch.
	RollbackEpoch uint64
}

// Binding says node NodeID belongs to Scope. Pilot signs one per ADS stream, so
// it also says whether the content sent with it is current for that stream.
type Binding struct {
	NodeID     string
	Scope      string
	IssuedAt   time.Time
	ValidUntil time.Time
	// Current: the content sent with this binding is compiled from at least
	// StreamRevision, the store revision when the stream opened. False when
	// pilot timed out waiting for that compile and sent what it had.
	Current        bool
	StreamRevision int64
}

// Signed is one signed part; immutable once made (pilot shares a content part
// between every sidecar of a scope).
type Signed struct {
	Body      []byte // deterministic protobuf of the part
	Signature []byte
	KeyID     string
}

// KeyID names a public key: hex of the first 8 bytes of its sha256.
func KeyID(pub ed25519.PublicKey) string {
	s := sha256.Sum256(pub)
	return hex.EncodeToString(s[:8])
}

// SignContent serialises c deterministically and signs it.
func SignContent(priv ed25519.PrivateKey, c Content) (*Signed, error) {
	if err := checkPart("content", "scope", c.Scope, c.IssuedAt, c.ValidUntil); err != nil {
		return nil, err
	}
	if c.Count < 0 {
		return nil, fmt.Errorf("sign manifest content for scope %q: count %d is negative", c.Scope, c.Count)
	}
	pc := &manifestpb.Content{
		Scope:         c.Scope,
		Revision:      c.Revision,
		Digest:        c.Digest[:],
		Count:         uint64(c.Count),
		IssuedAt:      timestamppb.New(c.IssuedAt),
		ValidUntil:    timestamppb.New(c.ValidUntil),
		RollbackEpoch: c.RollbackEpoch,
	}
	if c.HasRootCA {
		pc.RootCaSha256 = c.RootCA[:]
	}
	return signPart(priv, contentContext, pc)
}

// SignBinding serialises b deterministically and signs it.
func SignBinding(priv ed25519.PrivateKey, b Binding) (*Signed, error) {
	if err := checkPart("binding", "node id", b.NodeID, b.IssuedAt, b.ValidUntil); err != nil {
		return nil, err
	}
	if err := checkPart("binding for "+b.NodeID, "scope", b.Scope, b.IssuedAt, b.ValidUntil); err != nil {
		return nil, err
	}
	if b.StreamRevision < 0 {
		return nil, fmt.Errorf("sign manifest binding for %s: stream revision %d is negative", b.NodeID, b.StreamRevision)
	}
	return signPart(priv, bindingContext, &manifestpb.Binding{
		NodeId:         b.NodeID,
		Scope:          b.Scope,
		IssuedAt:       timestamppb.New(b.IssuedAt),
		ValidUntil:     timestamppb.New(b.ValidUntil),
		Current:        b.Current,
		StreamRevision: b.StreamRevision,
	})
}

func checkPart(part, field, id string, issued, until time.Time) error {
	switch {
	case id == "":
		return fmt.Errorf("sign manifest %s: %s: required", part, field)
	case len(id) > MaxIDBytes:
		return fmt.Errorf("sign manifest %s: %s: %d bytes exceeds %d", part, field, len(id), MaxIDBytes)
	case !until.After(issued):
		return fmt.Errorf("sign manifest %s %q: valid_until %s not after issued_at %s", part, id, until, issued)
	case until.Sub(issued) > MaxValidity:
		return fmt.Errorf("sign manifest %s %q: valid for %s, more than %s", part, id, until.Sub(issued), MaxValidity)
	}
	return nil
}

func signPart(priv ed25519.PrivateKey, context string, m proto.Message) (*Signed, error) {
	if len(priv) != ed25519.PrivateKeySize {
		return nil, fmt.Errorf("sign manifest: private key: %d bytes, want %d", len(priv), ed25519.PrivateKeySize)
	}
	body, err := proto.MarshalOptions{Deterministic: true}.Marshal(m)
	if err != nil {
		return nil, fmt.Errorf("sign manifest: %w", err)
	}
	return &Signed{Body: body, Signature: ed25519.Sign(priv, withContext(context, body)), KeyID: KeyID(priv.Public().(ed25519.PublicKey))}, nil
}

func withContext(context string, body []byte) []byte {
	return append([]byte(context), body...)
}

// Assemble puts a content part and a binding part, signed by the same key, into
// the resource pilot sends, with the publisher's certificate chain (leaf first,
// the leaf's key the signing key; none for a publisher without a certificate).
// The parts are copied by reference (they are immutable).
func Assemble(content, binding *Signed, chain ...*x509.Certificate) (*manifestpb.SignedManifest, error) {
	switch {
	case content == nil || binding == nil:
		return nil, errors.New("assemble manifest: content and binding are required")
	case content.KeyID != binding.KeyID:
		return nil, fmt.Errorf("assemble manifest: content signed by key %s, binding by %s", content.KeyID, binding.KeyID)
	case len(chain) > MaxChainCerts:
		return nil, fmt.Errorf("assemble manifest: publisher chain of %d certificates, limit %d", len(chain), MaxChainCerts)
	}
	sm := &manifestpb.SignedManifest{KeyId: content.KeyID, Content: content.Body, ContentSignature: content.Signature,
		Binding: binding.Body, BindingSignature: binding.Signature}
	for i, c := range chain {
		if c == nil || len(c.Raw) == 0 {
			return nil, fmt.Errorf("assemble manifest: publisher chain[%d]: empty certificate", i)
		}
		sm.PublisherChain = append(sm.PublisherChain, c.Raw)
	}
	if len(chain) > 0 {
		pub, ok := chain[0].PublicKey.(ed25519.PublicKey)
		if !ok {
			return nil, fmt.Errorf("assemble manifest: publisher certificate serial %s: key is %T, want Ed25519", chain[0].SerialNumber, chain[0].PublicKey)
		}
		if KeyID(pub) != content.KeyID {
			return nil, fmt.Errorf("assemble manifest: publisher certificate serial %s holds key %s, parts signed by %s", chain[0].SerialNumber, KeyID(pub), content.KeyID)
		}
	}
	return sm, nil
}

// Manifest is a verified manifest, decoded for logs and /config_dump.
type Manifest struct {
	NodeID          string
	Scope           string
	Revision        int64
	RollbackEpoch   uint64 // Content.RollbackEpoch
	Digest          [32]byte
	Count           int
	IssuedAt        time.Time // of the content statement
	BindingIssuedAt time.Time
	ValidUntil      time.Time // the earlier of the two parts' validity
	KeyID           string
	// Current and StreamRevision are the binding's: whether pilot confirmed the
	// content current for the stream it was sent on, and the store revision
	// when that stream opened.
	Current        bool
	StreamRevision int64
	// RootCA is the signed hash of the ROOTCA Secret's Any.value (HasRootCA).
	RootCA    [32]byte
	HasRootCA bool
	// Publisher is the verified publisher certificate (leaf), nil when the
	// manifest was accepted by the pinned key alone.
	Publisher *x509.Certificate
}

// Decode parses an encoded SignedManifest (the xDS resource's Any.value or the
// persisted bytes) within MaxBytes. It checks the shape only; Verify checks trust.
func Decode(b []byte) (*manifestpb.SignedManifest, error) {
	if len(b) > MaxBytes {
		return nil, fmt.Errorf("%w: %d bytes exceeds %d", ErrMalformed, len(b), MaxBytes)
	}
	var sm manifestpb.SignedManifest
	if err := proto.Unmarshal(b, &sm); err != nil {
		return nil, fmt.Errorf("%w: %v", ErrMalformed, err)
	}
	return &sm, nil
}

// maxClockSkew tolerates a pilot clock slightly ahead of the sidecar's.
const maxClockSkew = 5 * time.Minute

// Trust is whom a sidecar trusts to publish manifests.
type Trust struct {
	// Roots certify publishers: the sidecar's --ca-root united with the last
	// trust bundle pilot delivered. Nil: no CA trust; only Pin.
	Roots *bundle.Bundle
	// TrustDomain is the mesh's: a publisher certificate must name
	// spiffe.Publisher(TrustDomain). Required with Roots.
	TrustDomain string
	// Pin, when set, is the only publisher key accepted (--publisher-key), with a
	// chain or without one: alone it keeps accepting publishers that have no
	// certificate. With Roots, a chain must verify as well as match the pin.
	Pin ed25519.PublicKey
	// CRL, when set, is the last revocation list the sidecar accepted (with the
	// trust bundle): a publisher certificate it lists is refused, whatever its
	// freshness (serving the last-known-good never depends on it).
	CRL *revoke.CRL
}

// Verify checks a manifest trusted by the pinned key pub alone (no CA): Trust{Pin:
// pub}.Verify.
func Verify(pub ed25519.PublicKey, sm *manifestpb.SignedManifest, nodeID string, now time.Time) (*Manifest, error) {
	return Trust{Pin: pub}.Verify(sm, nodeID, now)
}

// Verify checks a manifest that has just arrived, in order: the shape, the
// publisher (its chain verifies against Roots at now, so a publisher certificate
// past NotAfter is refused, names spiffe.Publisher(TrustDomain), holds an
// Ed25519 key that matches Pin when set; or, without a chain, Pin), the key id,
// both signatures, the node binding, that both parts name the same scope, and
// the validity window at now (the later issue time minus a small skew to the
// earlier valid-until, at most MaxValidity long), and returns the decoded
// manifest. The error wraps the sentinel of the first check that failed. Match
// then checks a candidate's resources against the digest.
func (t Trust) Verify(sm *manifestpb.SignedManifest, nodeID string, now time.Time) (*Manifest, error) {
	return t.verify(sm, nodeID, now, live)
}

// How verify judges time: live (just arrived), stored (a last-known-good) or
// history (an endorsement of a trust bundle).
type mode int

const (
	live mode = iota
	stored
	history
)

// VerifyStored checks a persisted manifest (a last-known-good) as Verify does,
// except that the publisher chain is checked at the time the manifest was
// signed (the later part's issued_at) rather than at now: a publisher
// certificate that expired after signing does not void the snapshot it signed,
// which stays bounded by the manifest's own validity (at most MaxValidity) and
// the routing staleness policy, so routing may continue on the last-known-good
// while pilot is away (seed 002). A manifest signed outside its certificate's
// validity, by an untrusted chain or by another identity is refused all the same.
func (t Trust) VerifyStored(sm *manifestpb.SignedManifest, nodeID string, now time.Time) (*Manifest, error) {
	return t.verify(sm, nodeID, now, stored)
}

// VerifyEndorsement checks a manifest kept as the proof that a trust bundle
// (the ROOTCA Secret whose hash its content commits to) came from a trusted
// publisher: as VerifyStored, the chain judged at signing time, but past its
// valid_until too. It says where a root came from, not that the snapshot it
// covered may still be served. (A publisher key that leaked can sign such
// proofs backdated into its certificate's validity; the CRL is the remedy.)
func (t Trust) VerifyEndorsement(sm *manifestpb.SignedManifest, nodeID string, now time.Time) (*Manifest, error) {
	return t.verify(sm, nodeID, now, history)
}

func (t Trust) verify(sm *manifestpb.SignedManifest, nodeID string, now time.Time, md mode) (*Manifest, error) {
	switch {
	case sm == nil:
		return nil, fmt.Errorf("%w: empty", ErrMalformed)
	case len(sm.GetContent()) == 0 || len(sm.GetContentSignature()) == 0:
		return nil, fmt.Errorf("%w: content: empty", ErrMalformed)
	case len(sm.GetBinding()) == 0 || len(sm.GetBindingSignature()) == 0:
		return nil, fmt.Errorf("%w: binding: empty", ErrMalformed)
	}
	if n := proto.Size(sm); n > MaxBytes {
		return nil, fmt.Errorf("%w: %d bytes exceeds %d", ErrMalformed, n, MaxBytes)
	}
	at := now
	if md != live {
		// The chain is judged at the signing time, read before the signatures
		// are checked: if it was altered, they fail below.
		c, b, err := parts(sm)
		if err != nil {
			return nil, err
		}
		m, err := decoded(c, b)
		if err != nil {
			return nil, err
		}
		at = m.issued()
	}
	pub, leaf, err := t.publisher(sm, at, md != live)
	if err != nil {
		return nil, err
	}
	if want := KeyID(pub); sm.GetKeyId() != want {
		return nil, fmt.Errorf("%w: key id %q, publisher key is %q", ErrKey, sm.GetKeyId(), want)
	}
	if !ed25519.Verify(pub, withContext(contentContext, sm.GetContent()), sm.GetContentSignature()) {
		return nil, fmt.Errorf("%w: content", ErrSignature)
	}
	if !ed25519.Verify(pub, withContext(bindingContext, sm.GetBinding()), sm.GetBindingSignature()) {
		return nil, fmt.Errorf("%w: binding", ErrSignature)
	}
	c, b, err := parts(sm)
	if err != nil {
		return nil, err
	}
	m, err := decoded(c, b)
	if err != nil {
		return nil, err
	}
	issued := m.issued()
	m.KeyID = sm.GetKeyId()
	m.Publisher = leaf
	if m.NodeID != nodeID {
		return nil, fmt.Errorf("%w: manifest node %q, this node is %q", ErrNode, m.NodeID, nodeID)
	}
	if c.GetScope() != b.GetScope() {
		return nil, fmt.Errorf("%w: binding scope %q, content scope %q", ErrScope, b.GetScope(), c.GetScope())
	}
	if now.Before(issued.Add(-maxClockSkew)) {
		return nil, fmt.Errorf("%w: issued %s, now %s", ErrNotYet, issued.UTC().Format(time.RFC3339), now.UTC().Format(time.RFC3339))
	}
	if md != history && !now.Before(m.ValidUntil) {
		return nil, fmt.Errorf("%w: valid until %s, now %s", ErrExpired, m.ValidUntil.UTC().Format(time.RFC3339), now.UTC().Format(time.RFC3339))
	}
	for _, p := range []struct {
		name          string
		issued, until time.Time
	}{{"content", m.IssuedAt, c.GetValidUntil().AsTime()}, {"binding", m.BindingIssuedAt, b.GetValidUntil().AsTime()}} {
		if d := p.until.Sub(p.issued); d > MaxValidity {
			return nil, fmt.Errorf("%w: %s valid for %s, more than %s", ErrExpired, p.name, d, MaxValidity)
		}
	}
	return m, nil
}

// parts decodes the two signed parts.
func parts(sm *manifestpb.SignedManifest) (*manifestpb.Content, *manifestpb.Binding, error) {
	var c manifestpb.Content
	if err := proto.Unmarshal(sm.GetContent(), &c); err != nil {
		return nil, nil, fmt.Errorf("%w: content: %v", ErrMalformed, err)
	}
	var b manifestpb.Binding
	if err := proto.Unmarshal(sm.GetBinding(), &b); err != nil {
		return nil, nil, fmt.Errorf("%w: binding: %v", ErrMalformed, err)
	}
	return &c, &b, nil
}

// issued is the later of the two parts' issue times.
func (m *Manifest) issued() time.Time {
	if m.BindingIssuedAt.After(m.IssuedAt) {
		return m.BindingIssuedAt
	}
	return m.IssuedAt
}

// publisher returns the key the manifest must be signed with, and the verified
// publisher certificate when it came with a chain the roots trust at at.
func (t Trust) publisher(sm *manifestpb.SignedManifest, at time.Time, stored bool) (ed25519.PublicKey, *x509.Certificate, error) {
	raw := sm.GetPublisherChain()
	if len(raw) == 0 || t.Roots == nil {
		// Without a chain, or without a bundle to check one against (a sidecar that
		// only pins a key), the pinned key decides.
		if t.Pin == nil {
			if t.Roots == nil {
				return nil, nil, fmt.Errorf("%w: no trust bundle and no pinned publisher key", ErrChain)
			}
			return nil, nil, fmt.Errorf("%w, and no publisher key is pinned (--publisher-key)", ErrNoChain)
		}
		return t.Pin, nil, nil
	}
	if len(raw) > MaxChainCerts {
		return nil, nil, fmt.Errorf("%w: publisher_chain: %d certificates, limit %d", ErrMalformed, len(raw), MaxChainCerts)
	}
	chain := make([]*x509.Certificate, len(raw))
	for i, der := range raw {
		c, err := x509.ParseCertificate(der)
		if err != nil {
			return nil, nil, fmt.Errorf("%w: publisher_chain[%d]: %v", ErrMalformed, i, err)
		}
		chain[i] = c
	}
	leaf := chain[0]
	pub, ok := leaf.PublicKey.(ed25519.PublicKey)
	if !ok {
		return nil, nil, fmt.Errorf("%w: publisher certificate serial %x: key is %T, want Ed25519", ErrKey, leaf.SerialNumber, leaf.PublicKey)
	}
	when := "now"
	if stored {
		when = "when it signed"
	}
	switch {
	case at.After(leaf.NotAfter):
		return nil, nil, fmt.Errorf("%w: publisher certificate serial %x expired at %s (%s: %s)", ErrPublisherExpired,
			leaf.SerialNumber, leaf.NotAfter.UTC().Format(time.RFC3339), when, at.UTC().Format(time.RFC3339))
	case at.Before(leaf.NotBefore):
		return nil, nil, fmt.Errorf("%w: publisher certificate serial %x not valid before %s (%s: %s)", ErrPublisherExpired,
			leaf.SerialNumber, leaf.NotBefore.UTC().Format(time.RFC3339), when, at.UTC().Format(time.RFC3339))
	}
	id, err := t.Roots.Verify(chain, at)
	if err != nil {
		return nil, nil, fmt.Errorf("%w: %v", ErrChain, err)
	}
	want, err := spiffe.Publisher(t.TrustDomain)
	if err != nil {
		return nil, nil, fmt.Errorf("%w: trust domain: %v", ErrPublisherID, err)
	}
	if id != want {
		return nil, nil, fmt.Errorf("%w: publisher certificate serial %x is %s, want %s", ErrPublisherID, leaf.SerialNumber, id, want)
	}
	if t.CRL != nil && t.CRL.Revoked(leaf.SerialNumber) {
		return nil, nil, fmt.Errorf("%w: publisher certificate serial %x is listed in CRL number %d", ErrPublisherRevoked, leaf.SerialNumber, t.CRL.Number())
	}
	if t.Pin != nil && !t.Pin.Equal(pub) {
		return nil, nil, fmt.Errorf("%w: publisher certificate serial %x holds key %s, the pinned key is %s", ErrKey, leaf.SerialNumber, KeyID(pub), KeyID(t.Pin))
	}
	return pub, leaf, nil
}

// decoded checks the signed parts' fields (a signed part can still be malformed
// if the signer had a bug) and merges them.
func decoded(c *manifestpb.Content, b *manifestpb.Binding) (*Manifest, error) {
	switch {
	case len(c.GetDigest()) != sha256.Size:
		return nil, fmt.Errorf("%w: content.digest: %d bytes, want %d", ErrMalformed, len(c.GetDigest()), sha256.Size)
	case c.GetCount() > math.MaxInt32:
		return nil, fmt.Errorf("%w: content.count %d out of range", ErrMalformed, c.GetCount())
	case c.GetIssuedAt().CheckValid() != nil || c.GetValidUntil().CheckValid() != nil:
		return nil, fmt.Errorf("%w: content: issued_at and valid_until required", ErrMalformed)
	case b.GetIssuedAt().CheckValid() != nil || b.GetValidUntil().CheckValid() != nil:
		return nil, fmt.Errorf("%w: binding: issued_at and valid_until required", ErrMalformed)
	case c.GetScope() == "" || b.GetScope() == "" || b.GetNodeId() == "":
		return nil, fmt.Errorf("%w: scope and node id required", ErrMalformed)
	case b.GetStreamRevision() < 0:
		return nil, fmt.Errorf("%w: binding.stream_revision %d is negative", ErrMalformed, b.GetStreamRevision())
	}
	m := &Manifest{
		NodeID:          b.GetNodeId(),
		Scope:           c.GetScope(),
		Revision:        c.GetRevision(),
		RollbackEpoch:   c.GetRollbackEpoch(),
		Count:           int(c.GetCount()),
		IssuedAt:        c.GetIssuedAt().AsTime(),
		BindingIssuedAt: b.GetIssuedAt().AsTime(),
		ValidUntil:      c.GetValidUntil().AsTime(),
		Current:         b.GetCurrent(),
		StreamRevision:  b.GetStreamRevision(),
	}
	copy(m.Digest[:], c.GetDigest())
	if rc := c.GetRootCaSha256(); len(rc) > 0 {
		if len(rc) != sha256.Size {
			return nil, fmt.Errorf("%w: content.root_ca_sha256: %d bytes, want %d", ErrMalformed, len(rc), sha256.Size)
		}
		copy(m.RootCA[:], rc)
		m.HasRootCA = true
	}
	if u := b.GetValidUntil().AsTime(); u.Before(m.ValidUntil) {
		m.ValidUntil = u
	}
	return m, nil
}

// Match checks that have (type URL -> name -> sha256 of Any.value) is exactly the
// set the manifest's digest commits to. Types listed in ignore (e.g. the
// manifest's own type) are skipped.
func (m *Manifest) Match(have map[string]map[string][32]byte, ignore ...string) error {
	d, n := DigestOf(have, ignore...)
	if d != m.Digest {
		return fmt.Errorf("%w: %d resources digest to %s, manifest revision %d has %d resources with digest %s",
			ErrMismatch, n, hex.EncodeToString(d[:8]), m.Revision, m.Count, hex.EncodeToString(m.Digest[:8]))
	}
	if n != m.Count {
		// Equal digests with unequal counts means a signer bug: refuse all the same.
		return fmt.Errorf("%w: %d resources, manifest says %d", ErrMismatch, n, m.Count)
	}
	return nil
}
