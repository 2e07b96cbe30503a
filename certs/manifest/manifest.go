// Package manifest signs and verifies the per-proxy manifest that makes a sidecar's
// persisted last-known-good snapshot trustworthy: pilot signs (node, revision, every
// resource's type, name and content hash, validity) with its Ed25519 publisher key;
// the sidecar verifies against the public key from its bootstrap before it activates
// or reuses a snapshot. Shared by pilot and sidecar, so it imports neither.
package manifest

//go:generate protoc --go_out=. --go_opt=paths=source_relative manifestpb/manifest.proto

import (
	"bytes"
	"crypto/ed25519"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
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

// MaxBytes bounds a signed manifest accepted from the wire or disk.
const MaxBytes = 4 << 20

// Each check that can refuse a manifest has its own sentinel so logs and tests say
// exactly which one failed.
var (
	ErrMalformed = errors.New("manifest malformed")
	ErrKey       = errors.New("manifest signed by another publisher key")
	ErrSignature = errors.New("manifest signature invalid")
	ErrNode      = errors.New("manifest is for another node")
	ErrExpired   = errors.New("manifest past its validity")
	ErrNotYet    = errors.New("manifest not yet valid")
	ErrMismatch  = errors.New("resources do not match manifest")
)

// Entry is one resource the manifest covers.
type Entry struct {
	TypeURL string
	Name    string
	SHA256  [32]byte
}

// Manifest is the verified, decoded content.
type Manifest struct {
	NodeID     string
	Revision   int64
	Resources  []Entry // sorted by TypeURL, Name
	IssuedAt   time.Time
	ValidUntil time.Time
}

// Hash is the content hash a manifest entry records for a resource's Any.value.
func Hash(anyValue []byte) [32]byte { return sha256.Sum256(anyValue) }

// KeyID names a public key: hex of the first 8 bytes of its sha256.
func KeyID(pub ed25519.PublicKey) string {
	s := sha256.Sum256(pub)
	return hex.EncodeToString(s[:8])
}

// Sign serialises m deterministically and signs it.
func Sign(priv ed25519.PrivateKey, m Manifest) (*manifestpb.SignedManifest, error) {
	if m.NodeID == "" {
		return nil, fmt.Errorf("sign manifest: node id: required")
	}
	if !m.ValidUntil.After(m.IssuedAt) {
		return nil, fmt.Errorf("sign manifest for %s: valid_until %s not after issued_at %s", m.NodeID, m.ValidUntil, m.IssuedAt)
	}
	entries := append([]Entry(nil), m.Resources...)
	sortEntries(entries)
	pb := &manifestpb.Manifest{
		NodeId:     m.NodeID,
		Revision:   m.Revision,
		IssuedAt:   timestamppb.New(m.IssuedAt),
		ValidUntil: timestamppb.New(m.ValidUntil),
	}
	for i, e := range entries {
		if i > 0 && entries[i-1].TypeURL == e.TypeURL && entries[i-1].Name == e.Name {
			return nil, fmt.Errorf("sign manifest for %s: duplicate resource %s %q", m.NodeID, e.TypeURL, e.Name)
		}
		h := e.SHA256
		pb.Resources = append(pb.Resources, &manifestpb.Entry{TypeUrl: e.TypeURL, Name: e.Name, Sha256: h[:]})
	}
	body, err := proto.MarshalOptions{Deterministic: true}.Marshal(pb)
	if err != nil {
		return nil, fmt.Errorf("sign manifest for %s: %w", m.NodeID, err)
	}
	pub := priv.Public().(ed25519.PublicKey)
	return &manifestpb.SignedManifest{Manifest: body, Signature: ed25519.Sign(priv, body), KeyId: KeyID(pub)}, nil
}

// Verify checks, in order, the key id, the signature, the node binding and the
// validity window at now, and returns the decoded manifest. The error wraps the
// sentinel of the first check that failed.
func Verify(pub ed25519.PublicKey, sm *manifestpb.SignedManifest, nodeID string, now time.Time) (*Manifest, error) {
	if sm == nil || len(sm.GetManifest()) == 0 {
		return nil, fmt.Errorf("%w: empty", ErrMalformed)
	}
	if len(sm.GetManifest()) > MaxBytes {
		return nil, fmt.Errorf("%w: %d bytes exceeds %d", ErrMalformed, len(sm.GetManifest()), MaxBytes)
	}
	if want := KeyID(pub); sm.GetKeyId() != want {
		return nil, fmt.Errorf("%w: key id %q, trusted key is %q", ErrKey, sm.GetKeyId(), want)
	}
	if !ed25519.Verify(pub, sm.GetManifest(), sm.GetSignature()) {
		return nil, ErrSignature
	}
	var pb manifestpb.Manifest
	if err := proto.Unmarshal(sm.GetManifest(), &pb); err != nil {
		return nil, fmt.Errorf("%w: %v", ErrMalformed, err)
	}
	m := &Manifest{
		NodeID:     pb.GetNodeId(),
		Revision:   pb.GetRevision(),
		IssuedAt:   pb.GetIssuedAt().AsTime(),
		ValidUntil: pb.GetValidUntil().AsTime(),
	}
	for i, e := range pb.GetResources() {
		if len(e.GetSha256()) != sha256.Size {
			return nil, fmt.Errorf("%w: resources[%d].sha256: %d bytes", ErrMalformed, i, len(e.GetSha256()))
		}
		var h [32]byte
		copy(h[:], e.GetSha256())
		m.Resources = append(m.Resources, Entry{TypeURL: e.GetTypeUrl(), Name: e.GetName(), SHA256: h})
	}
	if m.NodeID != nodeID {
		return nil, fmt.Errorf("%w: manifest node %q, this node is %q", ErrNode, m.NodeID, nodeID)
	}
	if now.Before(m.IssuedAt.Add(-maxClockSkew)) {
		return nil, fmt.Errorf("%w: issued %s, now %s", ErrNotYet, m.IssuedAt.UTC().Format(time.RFC3339), now.UTC().Format(time.RFC3339))
	}
	if !now.Before(m.ValidUntil) {
		return nil, fmt.Errorf("%w: valid until %s, now %s", ErrExpired, m.ValidUntil.UTC().Format(time.RFC3339), now.UTC().Format(time.RFC3339))
	}
	return m, nil
}

// maxClockSkew tolerates a pilot clock slightly ahead of the sidecar's.
const maxClockSkew = 5 * time.Minute

// Match checks that have (type URL -> name -> sha256 of Any.value) is exactly the
// set the manifest covers: nothing missing, nothing extra, every hash equal.
// Types listed in ignore (e.g. the manifest's own type) are skipped on both sides.
func (m *Manifest) Match(have map[string]map[string][32]byte, ignore ...string) error {
	skip := map[string]bool{}
	for _, t := range ignore {
		skip[t] = true
	}
	seen := 0
	for _, e := range m.Resources {
		if skip[e.TypeURL] {
			continue
		}
		h, ok := have[e.TypeURL][e.Name]
		if !ok {
			return fmt.Errorf("%w: %s %q missing", ErrMismatch, e.TypeURL, e.Name)
		}
		if !bytes.Equal(h[:], e.SHA256[:]) {
			return fmt.Errorf("%w: %s %q content hash differs", ErrMismatch, e.TypeURL, e.Name)
		}
		seen++
	}
	total := 0
	for t, byName := range have {
		if !skip[t] {
			total += len(byName)
		}
	}
	if total != seen {
		for t, byName := range have {
			if skip[t] {
				continue
			}
			for n := range byName {
				if !m.covers(t, n) {
					return fmt.Errorf("%w: %s %q not in manifest", ErrMismatch, t, n)
				}
			}
		}
	}
	return nil
}

func (m *Manifest) covers(typeURL, name string) bool {
	i := sort.Search(len(m.Resources), func(i int) bool {
		e := m.Resources[i]
		return e.TypeURL > typeURL || (e.TypeURL == typeURL && e.Name >= name)
	})
	return i < len(m.Resources) && m.Resources[i].TypeURL == typeURL && m.Resources[i].Name == name
}

func sortEntries(es []Entry) {
	sort.Slice(es, func(i, j int) bool {
		if es[i].TypeURL != es[j].TypeURL {
			return es[i].TypeURL < es[j].TypeURL
		}
		return es[i].Name < es[j].Name
	})
}
