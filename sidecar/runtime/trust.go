package runtime

import (
	"fmt"
	"time"

	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/anypb"

	"github.com/weft-mesh/weft/certs/manifest"
	"github.com/weft-mesh/weft/sidecar/runtime/lkg"
	"github.com/weft-mesh/weft/sidecar/xdsclient"
	"github.com/weft-mesh/weft/sidecar/xdsresource"
	"github.com/weft-mesh/weft/sidecar/xdswire"
)

// DecodeSecret decodes an SDS Secret as the sidecar does (Decode calls it;
// pilot runs it on what it sends). ROOTCA's trust bundle is checked here
// whoever decodes the rest, since manifests are trusted through it.
func DecodeSecret(a *anypb.Any) (string, any, error) {
	if a == nil {
		return "", nil, fmt.Errorf("%w: nil secret", xdsresource.ErrInvalid)
	}
	if len(a.GetValue()) > xdsresource.MaxResourceBytes {
		return "", nil, fmt.Errorf("%w: secret is %d bytes, limit %d", xdsresource.ErrInvalid, len(a.GetValue()), xdsresource.MaxResourceBytes)
	}
	var s xdswire.Secret
	if err := proto.Unmarshal(a.GetValue(), &s); err != nil {
		return "", nil, fmt.Errorf("%w: secret: malformed protobuf: %v", xdsresource.ErrInvalid, err)
	}
	name := s.GetName()
	if name == manifest.RootCAName {
		if _, err := lkg.RootBundle(a.GetValue()); err != nil {
			return name, nil, fmt.Errorf("%w: %v", xdsresource.ErrInvalid, err)
		}
	}
	return xdsresource.Decode(xdsclient.TypeSecret, a)
}

// trustStep is what activating a manifest does to trust: the path to persist
// with it, and the trust (and its path) the next manifest is verified with.
type trustStep struct {
	path      []lkg.Endorsement // of the manifest itself
	nextPath  []lkg.Endorsement
	nextTrust manifest.Trust
}

// trustStepLocked computes the trust step of activating mv with u's ROOTCA, at
// now. Without --ca-root there are no paths (the pinned key decides). mv was
// verified under the current trust, whose path is r.trustPath; its own path is
// the shortest prefix of that under which it verifies. When mv commits to the
// ROOTCA it is sent with, that bundle becomes trusted for what follows.
func (r *Runtime) trustStepLocked(u *xdsclient.Update, mv *Manifest, now time.Time) (*trustStep, error) {
	if r.cfg.TrustRoots == nil || mv == nil || mv.Verified == nil {
		return nil, nil
	}
	base := r.baseTrust()
	path, err := lkg.Shortest(base, r.trustPath, mv.Signed, r.cfg.NodeID, now)
	if err != nil {
		return nil, err
	}
	end, err := lkg.Follow(base, path, r.cfg.NodeID, now)
	if err != nil {
		return nil, err
	}
	st := &trustStep{path: path, nextPath: path, nextTrust: end}
	res, ok := u.Resources[xdsclient.TypeSecret][manifest.RootCAName]
	if !ok {
		return st, nil
	}
	raw := res.Raw.GetValue()
	if !mv.Verified.HasRootCA || mv.Verified.RootCA != manifest.Hash(raw) {
		// The digest covers it (Match passed) but the content does not commit
		// to it apart: it cannot be proven from disk, so it is not trusted for
		// publishers (mTLS may still use it).
		r.log.Warn("ROOTCA not committed by the manifest's root_ca_sha256: not used to trust publishers", "revision", mv.Verified.Revision)
		return st, nil
	}
	e := lkg.Endorsement{Manifest: mv.Signed, RootCA: raw}
	next, err := lkg.Endorsed(base, e, mv.Verified)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", lkg.ErrTrustPath, err)
	}
	st.nextPath = append(path[:len(path):len(path)], e)
	st.nextTrust = next
	return st, nil
}

// applyTrustLocked makes step the trust in force (nil: unchanged).
func (r *Runtime) applyTrustLocked(step *trustStep) {
	if step == nil {
		return
	}
	r.trustPath = step.nextPath
	t := step.nextTrust
	r.trust.Store(&t)
}
