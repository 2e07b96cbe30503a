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
// A sidecar accepts a candidate when both signatures verify under its trusted key,
// the binding names it, both parts name the same scope, now is inside both
// validity windows and the digest it recomputes over the candidate equals the
// content's. The per-entry list is not sent, so a manifest is a few hundred bytes
// whatever the mesh size.
package manifest

//go:generate protoc --go_out=. --go_opt=paths=source_relative manifestpb/manifest.proto

import (
	"crypto/ed25519"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"math"
	"sort"
	"time"

	"github.com/weft-mesh/weft/certs/manifest/manifestpb"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/timestamppb"
)

// TypeURL is the xDS type URL of the signed manifest resource; Name its only name.
const (
	TypeURL = "type.googleapis.com/weft.manifest.v1.SignedManifest"
	Name    = "manifest"
)

// Limits on what Sign produces and Decode/Verify accept.
const (
	// MaxBytes bounds an encoded SignedManifest from the wire or disk. A manifest
	// holds two short messages and two signatures; this leaves room for long
	// node ids and scopes, nothing more.
	MaxBytes = 16 << 10
	// MaxIDBytes bounds a node id and a scope.
	MaxIDBytes = 1024
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
	return signPart(priv, contentContext, &manifestpb.Content{
		Scope:      c.Scope,
		Revision:   c.Revision,
		Digest:     c.Digest[:],
		Count:      uint64(c.Count),
		IssuedAt:   timestamppb.New(c.IssuedAt),
		ValidUntil: timestamppb.New(c.ValidUntil),
	})
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
// the resource pilot sends. The parts are copied by reference (they are immutable).
func Assemble(content, binding *Signed) (*manifestpb.SignedManifest, error) {
	switch {
	case content == nil || binding == nil:
		return nil, errors.New("assemble manifest: content and binding are required")
	case content.KeyID != binding.KeyID:
		return nil, fmt.Errorf("assemble manifest: content signed by key %s, binding by %s", content.KeyID, binding.KeyID)
	}
	return &manifestpb.SignedManifest{KeyId: content.KeyID, Content: content.Body, ContentSignature: content.Signature,
		Binding: binding.Body, BindingSignature: binding.Signature}, nil
}

// Manifest is a verified manifest, decoded for logs and /config_dump.
type Manifest struct {
	NodeID          string
	Scope           string
	Revision        int64
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

// Verify checks, in order, the shape, the key id, both signatures, the node
// binding, that both parts name the same scope, and the validity window at now
// (the later issue time minus a small skew to the earlier valid-until), and returns
// the decoded manifest. The error wraps the sentinel of the first check that
// failed. Match then checks a candidate's resources against the digest.
func Verify(pub ed25519.PublicKey, sm *manifestpb.SignedManifest, nodeID string, now time.Time) (*Manifest, error) {
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
	if want := KeyID(pub); sm.GetKeyId() != want {
		return nil, fmt.Errorf("%w: key id %q, trusted key is %q", ErrKey, sm.GetKeyId(), want)
	}
	if !ed25519.Verify(pub, withContext(contentContext, sm.GetContent()), sm.GetContentSignature()) {
		return nil, fmt.Errorf("%w: content", ErrSignature)
	}
	if !ed25519.Verify(pub, withContext(bindingContext, sm.GetBinding()), sm.GetBindingSignature()) {
		return nil, fmt.Errorf("%w: binding", ErrSignature)
	}
	var c manifestpb.Content
	if err := proto.Unmarshal(sm.GetContent(), &c); err != nil {
		return nil, fmt.Errorf("%w: content: %v", ErrMalformed, err)
	}
	var b manifestpb.Binding
	if err := proto.Unmarshal(sm.GetBinding(), &b); err != nil {
		return nil, fmt.Errorf("%w: binding: %v", ErrMalformed, err)
	}
	m, err := decoded(&c, &b)
	if err != nil {
		return nil, err
	}
	m.KeyID = sm.GetKeyId()
	if m.NodeID != nodeID {
		return nil, fmt.Errorf("%w: manifest node %q, this node is %q", ErrNode, m.NodeID, nodeID)
	}
	if c.GetScope() != b.GetScope() {
		return nil, fmt.Errorf("%w: binding scope %q, content scope %q", ErrScope, b.GetScope(), c.GetScope())
	}
	issued := m.IssuedAt
	if m.BindingIssuedAt.After(issued) {
		issued = m.BindingIssuedAt
	}
	if now.Before(issued.Add(-maxClockSkew)) {
		return nil, fmt.Errorf("%w: issued %s, now %s", ErrNotYet, issued.UTC().Format(time.RFC3339), now.UTC().Format(time.RFC3339))
	}
	if !now.Before(m.ValidUntil) {
		return nil, fmt.Errorf("%w: valid until %s, now %s", ErrExpired, m.ValidUntil.UTC().Format(time.RFC3339), now.UTC().Format(time.RFC3339))
	}
	return m, nil
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
		Count:           int(c.GetCount()),
		IssuedAt:        c.GetIssuedAt().AsTime(),
		BindingIssuedAt: b.GetIssuedAt().AsTime(),
		ValidUntil:      c.GetValidUntil().AsTime(),
		Current:         b.GetCurrent(),
		StreamRevision:  b.GetStreamRevision(),
	}
	copy(m.Digest[:], c.GetDigest())
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
