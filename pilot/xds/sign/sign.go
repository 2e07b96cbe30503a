// Package sign produces the SignedManifest resource that lets a Weft sidecar check
// a whole snapshot before activating it and trust it again from disk after a
// restart (certs/manifest has the format and the checks).
//
// A manifest has two signed parts, so its cost does not grow with fleet × mesh:
// Content commits (through a digest) to every resource of one scope's snapshot and
// is signed once per scope snapshot, shared by every sidecar of the scope; Binding
// ties one node to its scope and is signed per node only when the node connects,
// changes scope, or its binding reaches half its validity. Resource puts the two
// together; the result is a few hundred bytes whatever the mesh size.
//
// Pilot adds the manifest to each Weft sidecar's snapshot (node.Registers()) and
// sends it LAST in push order: the sidecar activates a candidate only once it
// matches the manifest. Valid-until bounds how long a sidecar may reuse its
// persisted copy, so pilot re-signs (a new snapshot version) at half the validity.
package sign

import (
	"crypto/ed25519"
	"crypto/x509"
	"errors"
	"fmt"
	"time"

	"github.com/weft-mesh/weft/certs/manifest"
	"github.com/weft-mesh/weft/pilot/xds/snapshot"
)

// DefaultValidity is how long a manifest part is valid when the caller passes zero.
const DefaultValidity = 24 * time.Hour

// MaxValidity bounds validity: a persisted snapshot must not be trusted forever
// (sidecars refuse a longer one).
const MaxValidity = manifest.MaxValidity

// Publisher is who signs manifests: an Ed25519 key and its certificate chain
// from the mesh CA (leaf first, SPIFFE ID spiffe://<td>/weft/publisher; empty
// for a key without a certificate, which only sidecars pinning it accept).
type Publisher struct {
	Key   ed25519.PrivateKey
	Chain []*x509.Certificate
}

// Content signs the content statement for scope: snap's store revision and the
// digest of every resource of snap (the hash of each Any.value; a manifest
// resource in snap is not covered), with the hash of its ROOTCA Secret apart
// when it has one, valid from issued for validity (0: DefaultValidity).
func Content(priv ed25519.PrivateKey, scope string, snap *snapshot.Snapshot, issued time.Time, validity time.Duration) (*manifest.Signed, error) {
	return ContentAtEpoch(priv, scope, snap, issued, validity, 0)
}

// ContentAtEpoch is Content carrying pilot's rollback epoch
// (pilot/store/highwater): sidecars accept a revision lower than the one they
// run only from a higher epoch.
func ContentAtEpoch(priv ed25519.PrivateKey, scope string, snap *snapshot.Snapshot, issued time.Time, validity time.Duration, epoch uint64) (*manifest.Signed, error) {
	what := fmt.Sprintf("sign manifest content for scope %q", scope)
	validity, err := check(what, priv, issued, validity)
	if err != nil {
		return nil, err
	}
	if snap == nil {
		return nil, fmt.Errorf("%s: nil snapshot", what)
	}
	n := 0
	for _, byName := range snap.Resources {
		n += len(byName)
	}
	entries := make([]manifest.Entry, 0, n)
	for typ, byName := range snap.Resources {
		if typ == manifest.TypeURL {
			continue
		}
		for name, r := range byName {
			if r.Any == nil {
				return nil, fmt.Errorf("%s: %s %q: no marshalled value", what, typ, name)
			}
			entries = append(entries, manifest.Entry{TypeURL: typ, Name: name, SHA256: manifest.Hash(r.Any.GetValue())})
		}
	}
	d, err := manifest.Digest(entries)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", what, err)
	}
	c := manifest.Content{Scope: scope, Revision: snap.Revision, Digest: d, Count: len(entries), IssuedAt: issued, ValidUntil: issued.Add(validity), RollbackEpoch: epoch}
	if r, ok := snap.Resources[manifest.SecretTypeURL][manifest.RootCAName]; ok {
		c.RootCA, c.HasRootCA = manifest.Hash(r.Any.GetValue()), true
	}
	return manifest.SignContent(priv, c)
}

// Stream is what a binding says about the ADS stream it is signed for.
type Stream struct {
	// Current: the content sent with the binding is compiled from at least
	// Revision (pilot waited for that compile); false when the wait timed out
	// and pilot sent the older snapshot it had.
	Current bool
	// Revision is the store revision when the stream opened.
	Revision int64
}

// Binding signs that nodeID belongs to scope, and what pilot knows of the
// node's stream, valid from issued for validity (0: DefaultValidity).
func Binding(priv ed25519.PrivateKey, nodeID, scope string, stream Stream, issued time.Time, validity time.Duration) (*manifest.Signed, error) {
	if nodeID == "" {
		return nil, errors.New("sign manifest binding: node id: required")
	}
	validity, err := check(fmt.Sprintf("sign manifest binding for %q", nodeID), priv, issued, validity)
	if err != nil {
		return nil, err
	}
	return manifest.SignBinding(priv, manifest.Binding{NodeID: nodeID, Scope: scope, IssuedAt: issued, ValidUntil: issued.Add(validity),
		Current: stream.Current, StreamRevision: stream.Revision})
}

func check(what string, priv ed25519.PrivateKey, issued time.Time, validity time.Duration) (time.Duration, error) {
	switch {
	case len(priv) != ed25519.PrivateKeySize:
		return 0, fmt.Errorf("%s: private key: %d bytes, want %d", what, len(priv), ed25519.PrivateKeySize)
	case validity < 0 || validity > MaxValidity:
		return 0, fmt.Errorf("%s: validity %s outside 0..%s", what, validity, MaxValidity)
	case issued.IsZero():
		return 0, fmt.Errorf("%s: issued time: required", what)
	}
	if validity == 0 {
		validity = DefaultValidity
	}
	return validity, nil
}

// Resource assembles a content part and a binding part, with the publisher's
// certificate chain (none for a key without one), into the manifest resource,
// named manifest.Name with type manifest.TypeURL.
func Resource(content, binding *manifest.Signed, chain ...*x509.Certificate) (snapshot.Resource, error) {
	cp, err := EncodeContent(content)
	if err != nil {
		return snapshot.Resource{}, err
	}
	bp, err := EncodeBinding(binding)
	if err != nil {
		return snapshot.Resource{}, err
	}
	ch, err := EncodeChain(chain...)
	if err != nil {
		return snapshot.Resource{}, err
	}
	return Join(cp, bp, ch)
}

// Manifest signs both parts for one node in one go, with the node's own scope
// ("node/" + nodeID): for tests and tools that serve a single sidecar, which
// serve what they have as current (Stream{Current: true} at snap's revision).
// Pilot signs content per scope and bindings per stream instead (pilot/xds/publish).
func Manifest(priv ed25519.PrivateKey, nodeID string, snap *snapshot.Snapshot, issued time.Time, validity time.Duration) (snapshot.Resource, error) {
	return Publisher{Key: priv}.Manifest(nodeID, snap, issued, validity)
}

// Manifest is the package's Manifest signed by p, its chain included.
func (p Publisher) Manifest(nodeID string, snap *snapshot.Snapshot, issued time.Time, validity time.Duration) (snapshot.Resource, error) {
	priv := p.Key
	if nodeID == "" {
		return snapshot.Resource{}, errors.New("sign manifest: node id: required")
	}
	scope := "node/" + nodeID
	c, err := Content(priv, scope, snap, issued, validity)
	if err != nil {
		return snapshot.Resource{}, err
	}
	b, err := Binding(priv, nodeID, scope, Stream{Current: true, Revision: snap.Revision}, issued, validity)
	if err != nil {
		return snapshot.Resource{}, err
	}
	return Resource(c, b, p.Chain...)
}

// With returns a copy of snap (same revision, resources shared, not copied) with the
// manifest resource for nodeID added under manifest.TypeURL.
func With(priv ed25519.PrivateKey, nodeID string, snap *snapshot.Snapshot, issued time.Time, validity time.Duration) (*snapshot.Snapshot, error) {
	return Publisher{Key: priv}.With(nodeID, snap, issued, validity)
}

// With is the package's With signed by p, its chain included.
func (p Publisher) With(nodeID string, snap *snapshot.Snapshot, issued time.Time, validity time.Duration) (*snapshot.Snapshot, error) {
	r, err := p.Manifest(nodeID, snap, issued, validity)
	if err != nil {
		return nil, err
	}
	res := make(map[string]map[string]snapshot.Resource, len(snap.Resources)+1)
	for typ, byName := range snap.Resources {
		res[typ] = byName
	}
	res[manifest.TypeURL] = map[string]snapshot.Resource{manifest.Name: r}
	return snapshot.FromResources(snap.Revision, res), nil
}
