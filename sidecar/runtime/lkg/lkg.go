// Package lkg persists and reloads a sidecar's last-known-good snapshot: the raw xDS
// resources it activated plus the manifest pilot signed for them, and the trust
// path that proves the manifest's publisher from the sidecar's --ca-root (see
// trust.go). A reloaded snapshot is trusted only after the path, the publisher
// (its certificate judged at signing time: manifest.Trust.VerifyStored), both
// signatures, the node binding, the scope, the validity window and the digest
// over every resource check out; each refusal names the check that failed.
package lkg

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sort"
	"time"

	"github.com/weft-mesh/weft/certs/manifest"
	"github.com/weft-mesh/weft/certs/manifest/manifestpb"
	"github.com/weft-mesh/weft/internal/atomicfile"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/anypb"
)

// FileName is the snapshot file inside the state directory.
const FileName = "last-known-good.json"

// MaxFileBytes bounds what Load reads, so a corrupt or hostile file cannot exhaust
// memory at start-up.
const MaxFileBytes = 64 << 20

// formatVersion is bumped on incompatible changes to the file layout or to what it
// holds: 2 carries the two-part manifest (content digest + node binding); a
// format-1 file (per-entry manifest) is refused and the sidecar waits for pilot.
// The trust path was added to format 2 compatibly: a file without one has an
// empty path (its manifest must verify under --ca-root or the pinned key).
const formatVersion = 2

// ErrNoSnapshot means the state directory holds no snapshot (first start).
var ErrNoSnapshot = errors.New("no last-known-good snapshot")

// Resource is one raw xDS resource as received.
type Resource struct {
	TypeURL string
	Name    string
	Version string
	Value   []byte // Any.value, exactly the bytes pilot sent and signed the hash of
}

// Snapshot is what is persisted: the resources that were active, the signed manifest
// that covers them, and when this sidecar last had a healthy stream confirming them
// (staleness age counts from there, not from a restart).
type Snapshot struct {
	NodeID        string
	Resources     []Resource
	Manifest      *manifestpb.SignedManifest
	LastConfirmed time.Time
	// Trust is the path from the --ca-root roots to those Manifest is signed
	// under (empty: under --ca-root itself, or a pinned key).
	Trust []Endorsement
}

type fileV2 struct {
	Format        int          `json:"format"`
	NodeID        string       `json:"nodeId"`
	LastConfirmed time.Time    `json:"lastConfirmed"`
	Manifest      []byte       `json:"manifest"` // proto-encoded SignedManifest
	Resources     []Resource   `json:"resources"`
	Trust         []fileEndors `json:"trust,omitempty"`
}

type fileEndors struct {
	Manifest []byte `json:"manifest"` // proto-encoded SignedManifest
	RootCA   []byte `json:"rootCA"`   // the ROOTCA Secret's Any.value
}

// Save writes s atomically (temp file, fsync, rename, fsync dir) to dir/FileName.
func Save(dir string, s *Snapshot) error {
	if s.Manifest == nil {
		return fmt.Errorf("save last-known-good: no manifest")
	}
	mb, err := proto.Marshal(s.Manifest)
	if err != nil {
		return fmt.Errorf("save last-known-good: manifest: %w", err)
	}
	res := append([]Resource(nil), s.Resources...)
	sort.Slice(res, func(i, j int) bool {
		if res[i].TypeURL != res[j].TypeURL {
			return res[i].TypeURL < res[j].TypeURL
		}
		return res[i].Name < res[j].Name
	})
	if len(s.Trust) > MaxPath {
		return fmt.Errorf("save last-known-good: trust path of %d endorsements, limit %d", len(s.Trust), MaxPath)
	}
	var trust []fileEndors
	for i, e := range s.Trust {
		b, err := proto.Marshal(e.Manifest)
		if err != nil {
			return fmt.Errorf("save last-known-good: trust[%d]: %w", i, err)
		}
		trust = append(trust, fileEndors{Manifest: b, RootCA: e.RootCA})
	}
	b, err := json.Marshal(fileV2{Format: formatVersion, NodeID: s.NodeID, LastConfirmed: s.LastConfirmed.UTC(), Manifest: mb, Resources: res, Trust: trust})
	if err != nil {
		return fmt.Errorf("save last-known-good: %w", err)
	}
	if len(b) > MaxFileBytes {
		return fmt.Errorf("save last-known-good: %d bytes exceeds %d", len(b), MaxFileBytes)
	}
	return atomicfile.Write(filepath.Join(dir, FileName), b, 0o600)
}

// Load reads dir/FileName and verifies it for nodeID at now, starting from
// trust (the --ca-root roots, the pinned key). It returns the snapshot and its
// verified manifest, or an error wrapping ErrNoSnapshot, ErrTrustPath, a
// manifest sentinel (manifest.ErrSignature, ErrNode, ErrExpired, ErrMismatch,
// ErrChain, ...) or a decode error.
func Load(dir string, trust manifest.Trust, nodeID string, now time.Time) (*Snapshot, *manifest.Manifest, error) {
	b, err := read(dir)
	if err != nil {
		return nil, nil, err
	}
	return Decode(b, trust, nodeID, now)
}

// read returns dir/FileName's bytes, at most MaxFileBytes.
func read(dir string) ([]byte, error) {
	path := filepath.Join(dir, FileName)
	f, err := os.Open(path)
	if errors.Is(err, os.ErrNotExist) {
		return nil, fmt.Errorf("%w in %s", ErrNoSnapshot, dir)
	}
	if err != nil {
		return nil, fmt.Errorf("last-known-good %s: %w", path, err)
	}
	defer f.Close()
	b, err := io.ReadAll(io.LimitReader(f, MaxFileBytes+1))
	if err != nil {
		return nil, fmt.Errorf("last-known-good %s: %w", path, err)
	}
	if len(b) > MaxFileBytes {
		return nil, fmt.Errorf("last-known-good %s: larger than %d bytes", path, MaxFileBytes)
	}
	return b, nil
}

// LoadTrust reads from dir/FileName only the trust it proves: its path and,
// when its manifest commits to the ROOTCA it holds, that bundle (verified as an
// endorsement: past the manifest's validity too). A sidecar whose snapshot is
// refused (expired, stale) still follows a root rotation it saw before going
// down. It returns the path to the end and the trust there.
func LoadTrust(dir string, base manifest.Trust, nodeID string, now time.Time) ([]Endorsement, manifest.Trust, error) {
	if base.Roots == nil {
		return nil, base, nil // a pinned key only: nothing to follow
	}
	b, err := read(dir)
	if err != nil {
		return nil, manifest.Trust{}, err
	}
	fv, sm, path, err := decodeFile(b)
	if err != nil {
		return nil, manifest.Trust{}, err
	}
	cur, err := Follow(base, path, nodeID, now)
	if err != nil {
		return nil, manifest.Trust{}, fmt.Errorf("last-known-good: %w", err)
	}
	m, err := cur.VerifyEndorsement(sm, nodeID, now)
	if err != nil {
		return nil, manifest.Trust{}, fmt.Errorf("last-known-good: %w: %w", ErrTrustPath, err)
	}
	for _, r := range fv.Resources {
		if r.TypeURL != manifest.SecretTypeURL || r.Name != manifest.RootCAName || !m.HasRootCA || m.RootCA != manifest.Hash(r.Value) {
			continue
		}
		e := Endorsement{Manifest: sm, RootCA: r.Value}
		next, err := Endorsed(base, e, m)
		if err != nil {
			return nil, manifest.Trust{}, fmt.Errorf("last-known-good: %w: %w", ErrTrustPath, err)
		}
		return append(path, e), next, nil
	}
	return path, cur, nil
}

// Decode verifies file content; Load's checks without the file system.
func Decode(b []byte, trust manifest.Trust, nodeID string, now time.Time) (*Snapshot, *manifest.Manifest, error) {
	fv, sm, path, err := decodeFile(b)
	if err != nil {
		return nil, nil, err
	}
	signer, err := Follow(trust, path, nodeID, now)
	if err != nil {
		return nil, nil, fmt.Errorf("last-known-good: %w", err)
	}
	// The publisher certificate is judged when it signed: one that expired
	// since does not void the snapshot (manifest.Trust.VerifyStored).
	m, err := signer.VerifyStored(sm, nodeID, now)
	if err != nil {
		return nil, nil, fmt.Errorf("last-known-good: %w", err)
	}
	have := map[string]map[string][32]byte{}
	for i, r := range fv.Resources {
		if r.TypeURL == "" || r.Name == "" {
			return nil, nil, fmt.Errorf("last-known-good: resources[%d]: type and name required", i)
		}
		if have[r.TypeURL] == nil {
			have[r.TypeURL] = map[string][32]byte{}
		}
		if _, dup := have[r.TypeURL][r.Name]; dup {
			return nil, nil, fmt.Errorf("last-known-good: resources[%d]: duplicate %s %q", i, r.TypeURL, r.Name)
		}
		have[r.TypeURL][r.Name] = manifest.Hash(r.Value)
	}
	if err := m.Match(have, manifest.TypeURL); err != nil {
		return nil, nil, fmt.Errorf("last-known-good: %w", err)
	}
	if fv.LastConfirmed.After(now.Add(time.Minute)) {
		return nil, nil, fmt.Errorf("last-known-good: lastConfirmed %s is in the future", fv.LastConfirmed.Format(time.RFC3339))
	}
	// lastConfirmed is the sidecar's own record and not signed; the manifest's signed
	// validity window still bounds how long the file can be trusted, whatever it says.
	last := fv.LastConfirmed
	if last.IsZero() {
		last = m.IssuedAt
	}
	if len(path) == 0 {
		path = nil
	}
	return &Snapshot{NodeID: fv.NodeID, Resources: fv.Resources, Manifest: sm, LastConfirmed: last, Trust: path}, m, nil
}

// decodeFile parses the file's layout, its manifest and its trust path.
func decodeFile(b []byte) (*fileV2, *manifestpb.SignedManifest, []Endorsement, error) {
	var fv fileV2
	if err := json.Unmarshal(b, &fv); err != nil {
		return nil, nil, nil, fmt.Errorf("last-known-good: decode: %w", err)
	}
	if fv.Format != formatVersion {
		return nil, nil, nil, fmt.Errorf("last-known-good: format %d, want %d", fv.Format, formatVersion)
	}
	sm, err := manifest.Decode(fv.Manifest)
	if err != nil {
		return nil, nil, nil, fmt.Errorf("last-known-good: manifest: %w", err)
	}
	if len(fv.Trust) > MaxPath {
		return nil, nil, nil, fmt.Errorf("last-known-good: %w: %d endorsements, limit %d: update --ca-root", ErrTrustPath, len(fv.Trust), MaxPath)
	}
	path := make([]Endorsement, 0, len(fv.Trust))
	for i, e := range fv.Trust {
		esm, err := manifest.Decode(e.Manifest)
		if err != nil {
			return nil, nil, nil, fmt.Errorf("last-known-good: %w: trust[%d]: %w", ErrTrustPath, i, err)
		}
		path = append(path, Endorsement{Manifest: esm, RootCA: e.RootCA})
	}
	return &fv, sm, path, nil
}

// Any returns the resource as an Any.
func (r Resource) Any() *anypb.Any { return &anypb.Any{TypeUrl: r.TypeURL, Value: r.Value} }
