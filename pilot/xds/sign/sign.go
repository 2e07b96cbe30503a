// Package sign produces, for one proxy's snapshot, the SignedManifest resource that
// lets the sidecar check the whole set before activating it and trust it again
// from disk after a restart (certs/manifest has the format and the checks).
//
// Pilot adds the result to each Weft sidecar's snapshot (node.Registers()) and sends
// it LAST in push order, after CDS, EDS, LDS and RDS: the sidecar activates a
// candidate only once it matches the manifest. The manifest's valid-until bounds
// how long a sidecar may reuse its persisted copy, so pilot must re-sign (a new
// snapshot version) well before it passes; re-signing at half the validity is the
// intended rhythm.
package sign

import (
	"crypto/ed25519"
	"errors"
	"fmt"
	"time"

	"github.com/weft-mesh/weft/certs/manifest"
	"github.com/weft-mesh/weft/pilot/xds/snapshot"
)

// DefaultValidity is how long a manifest is valid when the caller passes zero.
const DefaultValidity = 24 * time.Hour

// MaxValidity bounds validity: a persisted snapshot must not be trusted forever.
const MaxValidity = 30 * 24 * time.Hour

// Manifest signs a manifest for nodeID covering every resource of snap (the hash of
// each Any.value; an existing manifest resource in snap is not covered) at snap's
// store revision, valid from issued for validity (0: DefaultValidity). The result is
// the manifest resource, named manifest.Name with type manifest.TypeURL.
func Manifest(priv ed25519.PrivateKey, nodeID string, snap *snapshot.Snapshot, issued time.Time, validity time.Duration) (snapshot.Resource, error) {
	switch {
	case len(priv) != ed25519.PrivateKeySize:
		return snapshot.Resource{}, fmt.Errorf("sign manifest for %q: private key: %d bytes, want %d", nodeID, len(priv), ed25519.PrivateKeySize)
	case nodeID == "":
		return snapshot.Resource{}, errors.New("sign manifest: node id: required")
	case snap == nil:
		return snapshot.Resource{}, fmt.Errorf("sign manifest for %q: nil snapshot", nodeID)
	case validity < 0 || validity > MaxValidity:
		return snapshot.Resource{}, fmt.Errorf("sign manifest for %q: validity %s outside 0..%s", nodeID, validity, MaxValidity)
	case issued.IsZero():
		return snapshot.Resource{}, fmt.Errorf("sign manifest for %q: issued time: required", nodeID)
	}
	if validity == 0 {
		validity = DefaultValidity
	}
	m := manifest.Manifest{NodeID: nodeID, Revision: snap.Revision, IssuedAt: issued, ValidUntil: issued.Add(validity)}
	for typ, byName := range snap.Resources {
		if typ == manifest.TypeURL {
			continue
		}
		for name, r := range byName {
			if r.Any == nil {
				return snapshot.Resource{}, fmt.Errorf("sign manifest for %q: %s %q: no marshalled value", nodeID, typ, name)
			}
			m.Resources = append(m.Resources, manifest.Entry{TypeURL: typ, Name: name, SHA256: manifest.Hash(r.Any.GetValue())})
		}
	}
	sm, err := manifest.Sign(priv, m)
	if err != nil {
		return snapshot.Resource{}, err
	}
	r, err := snapshot.NewResource(manifest.TypeURL, manifest.Name, sm)
	if err != nil {
		return snapshot.Resource{}, fmt.Errorf("sign manifest for %q: %w", nodeID, err)
	}
	return r, nil
}

// With returns a copy of snap (same revision, resources shared, not copied) with the
// manifest resource for nodeID added under manifest.TypeURL.
func With(priv ed25519.PrivateKey, nodeID string, snap *snapshot.Snapshot, issued time.Time, validity time.Duration) (*snapshot.Snapshot, error) {
	r, err := Manifest(priv, nodeID, snap, issued, validity)
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
