package lkg

import (
	"errors"
	"fmt"
	"time"

	"google.golang.org/protobuf/proto"

	"github.com/weft-mesh/weft/certs/bundle"
	"github.com/weft-mesh/weft/certs/manifest"
	"github.com/weft-mesh/weft/certs/manifest/manifestpb"
	"github.com/weft-mesh/weft/certs/revoke"
	"github.com/weft-mesh/weft/sidecar/xdswire"
)

// A sidecar trusts publishers through its --ca-root roots united with the last
// trust bundle pilot delivered (the ROOTCA Secret), so a root rotation reaches
// it over xDS: the new bundle arrives signed by a publisher the old root still
// certifies, and the next manifests may be signed under the new root. After a
// restart the delivered bundle must be trusted again from disk, and the file
// alone proves nothing: a snapshot carrying its own ROOTCA and a manifest
// signed under a root in it would vouch for itself. So a snapshot is persisted
// with its trust path: the endorsements (each a delivered bundle with the signed
// manifest that delivered it, whose content commits to the bundle's hash) that
// lead from the --ca-root roots to the roots its manifest is signed under. Each
// step is verified under the roots the previous one gave; an empty path means
// the manifest is signed under --ca-root itself (no rotation since).

// MaxPath bounds a trust path: root rotations since the sidecar's --ca-root was
// written. Past it the sidecar refuses the next snapshot and says to update
// --ca-root (every rotation adds at most one step; the path is kept shortest).
const MaxPath = 8

// ErrTrustPath wraps every refusal of a trust path.
var ErrTrustPath = errors.New("trust path refused")

// Endorsement is a trust bundle pilot delivered, with the manifest that did.
type Endorsement struct {
	Manifest *manifestpb.SignedManifest
	RootCA   []byte // the ROOTCA Secret's Any.value, exactly as sent
}

// RootBundle reads the trust bundle from a ROOTCA Secret's Any.value:
// validation_context.trusted_ca.inline_bytes, PEM roots.
func RootBundle(value []byte) (*bundle.Bundle, error) {
	b, _, err := rootCA(value, false)
	return b, err
}

// RootCA reads the trust bundle and the CRL (validation_context.crl, signed by
// a root of the bundle) from a ROOTCA Secret's Any.value.
func RootCA(value []byte) (*bundle.Bundle, *revoke.CRL, error) {
	return rootCA(value, true)
}

func rootCA(value []byte, withCRL bool) (*bundle.Bundle, *revoke.CRL, error) {
	var s xdswire.Secret
	if err := proto.Unmarshal(value, &s); err != nil {
		return nil, nil, fmt.Errorf("secret %s: malformed protobuf: %v", manifest.RootCAName, err)
	}
	if s.GetName() != manifest.RootCAName {
		return nil, nil, fmt.Errorf("secret %q: name: want %s", s.GetName(), manifest.RootCAName)
	}
	vc := s.GetValidationContext()
	if vc == nil {
		return nil, nil, fmt.Errorf("secret %s: validation_context: required", manifest.RootCAName)
	}
	pem := vc.GetTrustedCa().GetInlineBytes()
	if len(pem) == 0 {
		return nil, nil, fmt.Errorf("secret %s: validation_context.trusted_ca.inline_bytes: required", manifest.RootCAName)
	}
	b, err := bundle.Parse(pem)
	if err != nil {
		return nil, nil, fmt.Errorf("secret %s: validation_context.trusted_ca: %w", manifest.RootCAName, err)
	}
	if !withCRL {
		return b, nil, nil
	}
	crl := vc.GetCrl().GetInlineBytes()
	if len(crl) == 0 {
		return nil, nil, fmt.Errorf("secret %s: validation_context.crl.inline_bytes: required", manifest.RootCAName)
	}
	c, err := revoke.ParsePEM(crl, b)
	if err != nil {
		return nil, nil, fmt.Errorf("secret %s: validation_context.crl: %w", manifest.RootCAName, err)
	}
	return b, c, nil
}

// bundle checks that e's manifest, verified as m, commits to e's bundle, and
// returns that bundle.
func (e Endorsement) bundle(m *manifest.Manifest) (*bundle.Bundle, *revoke.CRL, error) {
	if !m.HasRootCA || m.RootCA != manifest.Hash(e.RootCA) {
		return nil, nil, fmt.Errorf("manifest revision %d does not commit to this bundle", m.Revision)
	}
	return RootCA(e.RootCA)
}

// Endorsed returns the trust that e adds to base: base's roots united with e's
// bundle, and e's CRL, once e's manifest (m, verified by the caller) commits
// to it.
func Endorsed(base manifest.Trust, e Endorsement, m *manifest.Manifest) (manifest.Trust, error) {
	if base.Roots == nil {
		return manifest.Trust{}, errors.New("no --ca-root roots to add a delivered bundle to")
	}
	b, crl, err := e.bundle(m)
	if err != nil {
		return manifest.Trust{}, err
	}
	roots, err := base.Roots.Union(b)
	if err != nil {
		return manifest.Trust{}, err
	}
	next := base
	next.Roots, next.CRL = roots, crl
	return next, nil
}

// Follow verifies path from base (the --ca-root trust) at now and returns the
// trust at its end. Base without roots (a sidecar that only pins a key) has no
// path.
func Follow(base manifest.Trust, path []Endorsement, nodeID string, now time.Time) (manifest.Trust, error) {
	if len(path) == 0 {
		return base, nil
	}
	if base.Roots == nil {
		return manifest.Trust{}, fmt.Errorf("%w: %d endorsements but no --ca-root roots to start from", ErrTrustPath, len(path))
	}
	if len(path) > MaxPath {
		return manifest.Trust{}, fmt.Errorf("%w: %d endorsements, limit %d: update --ca-root", ErrTrustPath, len(path), MaxPath)
	}
	cur := base
	for i, e := range path {
		m, err := cur.VerifyEndorsement(e.Manifest, nodeID, now)
		if err != nil {
			return manifest.Trust{}, fmt.Errorf("%w: endorsement %d: %w", ErrTrustPath, i, err)
		}
		next, err := Endorsed(base, e, m)
		if err != nil {
			return manifest.Trust{}, fmt.Errorf("%w: endorsement %d: %w", ErrTrustPath, i, err)
		}
		cur = next
	}
	return cur, nil
}

// Shortest returns the shortest prefix of path under whose end sm verifies as
// an endorsement would (chain at signing time), verified from base: the path
// to persist with sm. path is one the caller verified; sm verified under its end.
func Shortest(base manifest.Trust, path []Endorsement, sm *manifestpb.SignedManifest, nodeID string, now time.Time) ([]Endorsement, error) {
	cur := base
	var errs []error
	for j := 0; j <= len(path); j++ {
		if j > 0 {
			e := path[j-1]
			m, err := cur.VerifyEndorsement(e.Manifest, nodeID, now)
			if err != nil {
				return nil, fmt.Errorf("%w: endorsement %d: %w", ErrTrustPath, j-1, err)
			}
			if cur, err = Endorsed(base, e, m); err != nil {
				return nil, fmt.Errorf("%w: endorsement %d: %w", ErrTrustPath, j-1, err)
			}
		}
		_, err := cur.VerifyEndorsement(sm, nodeID, now)
		if err == nil {
			if j > MaxPath {
				return nil, fmt.Errorf("%w: %d endorsements, limit %d: update --ca-root", ErrTrustPath, j, MaxPath)
			}
			return path[:j:j], nil
		}
		errs = append(errs, err)
	}
	return nil, fmt.Errorf("%w: the manifest verifies under no step of the path: %w", ErrTrustPath, errors.Join(errs...))
}
