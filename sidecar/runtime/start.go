package runtime

import (
	"errors"
	"fmt"
	"path/filepath"
	"time"

	"google.golang.org/protobuf/proto"

	"github.com/weft-mesh/weft/certs/manifest"
	"github.com/weft-mesh/weft/sidecar/runtime/lkg"
	"github.com/weft-mesh/weft/sidecar/runtime/staleness"
	"github.com/weft-mesh/weft/sidecar/xdsclient"
	"github.com/weft-mesh/weft/sidecar/xdsresource"
)

// errStale refuses a persisted snapshot whose routing state has expired.
var errStale = errors.New("routing state expired")

func lkgPath(dir string) string { return filepath.Join(dir, lkg.FileName) }

// LoadLastKnownGood reads the persisted snapshot and checks it completely: the
// signature against the publisher key, the node binding, the manifest's validity
// and every resource hash (lkg.Load), then that every resource decodes, the whole
// compiles, and no routing class has expired with its age counted from the file's
// lastConfirmed (not from this start). On success the snapshot is held ready for
// ActivateLastKnownGood and returned as the state to seed the xDS client with
// (xdsclient.Config.Initial). A refusal is logged once, naming the failed check,
// and becomes the readiness reason.
func (r *Runtime) LoadLastKnownGood() (*xdsclient.Update, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	u, st, err := r.loadLKG(r.cfg.Now())
	if err != nil {
		check := Check(err)
		r.lkgInfo.Loaded = "refused (" + check + "): " + err.Error()
		if errors.Is(err, lkg.ErrNoSnapshot) {
			r.lkgInfo.Loaded = "none"
			r.log.Info("no last-known-good snapshot; waiting for pilot", "path", r.lkgInfo.Path)
		} else {
			r.notReady = fmt.Sprintf("last-known-good refused (%s check failed): %v; waiting for pilot", check, err)
			r.log.Error("last-known-good refused", "check", check, "path", r.lkgInfo.Path, "error", err)
			r.keepLKGTrustLocked()
		}
		r.publishLocked()
		return nil, err
	}
	if err := r.trustFromLKGLocked(u, st, r.cfg.Now()); err != nil {
		// Cannot happen for a file lkg.Load verified; refuse it all the same.
		r.trustPath = nil
		base := r.baseTrust()
		r.trust.Store(&base)
		r.lkgInfo.Loaded = "refused (" + Check(err) + "): " + err.Error()
		r.notReady = fmt.Sprintf("last-known-good refused (%s check failed): %v; waiting for pilot", Check(err), err)
		r.log.Error("last-known-good refused", "check", Check(err), "path", r.lkgInfo.Path, "error", err)
		r.publishLocked()
		return nil, err
	}
	r.lkgInfo.Loaded = "verified"
	r.lkgCand = &lkgCandidate{state: st, update: u}
	r.notReady = "last-known-good verified, not yet active: waiting briefly for pilot"
	r.publishLocked()
	return u, nil
}

func (r *Runtime) loadLKG(now time.Time) (*xdsclient.Update, *activeState, error) {
	if r.cfg.InsecureSkipManifest {
		return nil, nil, fmt.Errorf("%w: manifests are skipped (--insecure-skip-manifest), nothing is persisted", lkg.ErrNoSnapshot)
	}
	snap, m, err := lkg.Load(r.cfg.StateDir, r.baseTrust(), r.cfg.NodeID, now)
	if err != nil {
		return nil, nil, err
	}
	u := &xdsclient.Update{Resources: map[string]map[string]xdsclient.Resource{}, Versions: map[string]string{}}
	versions := map[string]map[string]bool{}
	for _, res := range snap.Resources {
		var name string
		var v any
		var err error
		if res.TypeURL == manifest.TypeURL {
			// Verified by lkg.Load as a stored manifest (its publisher judged when
			// it signed); Decode would judge it as one just arriving.
			name, v, err = r.storedManifest(res, snap, m)
		} else {
			name, v, err = r.decode(res.TypeURL, res.Any())
		}
		if err != nil {
			return nil, nil, fmt.Errorf("last-known-good: %s %q: %w", res.TypeURL, res.Name, err)
		}
		if name == "" && res.TypeURL == xdsresource.LbEndpointType {
			name = res.Name // an LbEndpoint body has no name: its wrapper's, as on the stream
		}
		if name != res.Name {
			return nil, nil, fmt.Errorf("last-known-good: %w: %s %q decodes as %q", manifest.ErrMismatch, res.TypeURL, res.Name, name)
		}
		if u.Resources[res.TypeURL] == nil {
			u.Resources[res.TypeURL] = map[string]xdsclient.Resource{}
			versions[res.TypeURL] = map[string]bool{}
		}
		u.Resources[res.TypeURL][name] = xdsclient.Resource{Name: name, Version: res.Version, Value: v, Raw: res.Any()}
		versions[res.TypeURL][res.Version] = true
	}
	// A SotW type's resources share the response's version_info; announce it only
	// then (delta uses the per-resource versions).
	for typ, vs := range versions {
		if len(vs) == 1 {
			for v := range vs {
				u.Versions[typ] = v
			}
		}
	}
	// The manifest in the file must be the one that was active with the resources.
	mres, ok := u.Resources[manifest.TypeURL][manifest.Name]
	if !ok {
		return nil, nil, fmt.Errorf("last-known-good: %w: manifest resource missing", manifest.ErrMismatch)
	}
	if mv, _ := mres.Value.(*Manifest); mv == nil || mv.Verified == nil || mv.Verified.Digest != m.Digest || mv.Verified.Revision != m.Revision || !mv.Verified.IssuedAt.Equal(m.IssuedAt) {
		return nil, nil, fmt.Errorf("last-known-good: %w: manifest resource differs from the file's manifest", manifest.ErrMismatch)
	}
	digest, _, raw := contentOf(u, hashRaw)
	state := make(map[string]map[string]any, len(u.Resources))
	for typ, byName := range u.Resources {
		if typ == manifest.TypeURL {
			continue
		}
		state[typ] = make(map[string]any, len(byName))
		for n, res := range byName {
			state[typ][n] = res.Value
		}
	}
	// Judged by the policy the snapshot carries: the one it was running with.
	pol := effectivePolicy(r.cfg.Overrides, deliveredPolicy(state))
	if err := expired(pol, snap.LastConfirmed, now, r.seed); err != nil {
		return nil, nil, fmt.Errorf("%w (last confirmed %s)", err, snap.LastConfirmed.UTC().Format(time.RFC3339))
	}
	cfg, err := r.cfg.Compile(state)
	if err != nil {
		return nil, nil, fmt.Errorf("last-known-good: %w", err)
	}
	st := &activeState{cfg: cfg, digest: digest, versions: u.Versions, resources: raw, signed: snap.Manifest, m: m, source: SourceLKG, policy: pol,
		path: snap.Trust}
	// lastConfirmed travels in at (overwritten with the activation time later).
	st.at = snap.LastConfirmed
	return u, st, nil
}

// storedManifest is the manifest resource of a last-known-good file: it must be
// the file's manifest, which lkg.Load verified as m.
func (r *Runtime) storedManifest(res lkg.Resource, snap *lkg.Snapshot, m *manifest.Manifest) (string, any, error) {
	if res.Name != manifest.Name {
		return res.Name, nil, fmt.Errorf("%w: manifest resource named %q", manifest.ErrMalformed, res.Name)
	}
	sm, err := manifest.Decode(res.Value)
	if err != nil {
		return res.Name, nil, err
	}
	if !proto.Equal(sm, snap.Manifest) {
		return res.Name, nil, fmt.Errorf("%w: manifest resource differs from the file's manifest", manifest.ErrMismatch)
	}
	return res.Name, &Manifest{Signed: sm, Verified: m}, nil
}

// keepLKGTrustLocked adopts the trust a refused last-known-good still proves
// (lkg.LoadTrust): its routing state may be stale or its manifest expired, yet
// the root rotation it followed stays followed.
func (r *Runtime) keepLKGTrustLocked() {
	path, t, err := lkg.LoadTrust(r.cfg.StateDir, r.baseTrust(), r.cfg.NodeID, r.cfg.Now())
	if err != nil || len(path) == 0 {
		return
	}
	r.trustPath = path
	r.trust.Store(&t)
	r.log.Info("trust bundle kept from the refused last-known-good", "endorsements", len(path))
}

// trustFromLKGLocked adopts the trust a verified last-known-good proves: its
// path, and its own delivered bundle when its manifest commits to it. Pilot's
// next manifests may be signed under a root only that bundle holds (a rotation
// finished while the sidecar was down), whether or not the file's routing
// state is activated.
func (r *Runtime) trustFromLKGLocked(u *xdsclient.Update, st *activeState, now time.Time) error {
	if r.cfg.TrustRoots == nil {
		return nil
	}
	r.trustPath = st.path
	mres := u.Resources[manifest.TypeURL][manifest.Name]
	step, err := r.trustStepLocked(u, mres.Value.(*Manifest), now)
	if err != nil {
		return err
	}
	r.applyTrustLocked(step)
	return nil
}

// LastKnownGoodConfirmed is when the snapshot LoadLastKnownGood verified was last
// confirmed by pilot (zero if none is held): the xDS client's InitialConfirmed.
func (r *Runtime) LastKnownGoodConfirmed() time.Time {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.lkgCand == nil {
		return time.Time{}
	}
	return r.lkgCand.state.at
}

// ActivateLastKnownGood activates the snapshot LoadLastKnownGood verified, unless
// pilot already delivered a configuration. It reports whether it activated.
// The snapshot's staleness is judged again at activation: it may have expired
// while the sidecar waited for pilot.
func (r *Runtime) ActivateLastKnownGood() bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	c := r.lkgCand
	if c == nil || r.cur != nil {
		return false
	}
	now := r.cfg.Now()
	confirmed := c.state.at
	if err := expired(c.state.policy, confirmed, now, r.seed); err != nil {
		r.lkgCand = nil
		r.lkgInfo.Loaded = "refused (staleness): " + err.Error()
		r.notReady = "last-known-good refused (staleness check failed): " + err.Error() + "; waiting for pilot"
		r.log.Error("last-known-good refused", "check", "staleness", "path", r.lkgInfo.Path, "error", err)
		r.publishLocked()
		return false
	}
	st := *c.state
	st.at = now
	r.savedConfirm = confirmed
	r.activateLocked(&st, confirmed)
	r.publishLocked()
	return true
}

// expired reports (as errStale) a routing class that fails closed at now.
func expired(p *policy, confirmed, now time.Time, seed uint64) error {
	for _, s := range p.set.EvaluateAll(confirmed, nil, now, seed) {
		if routing(s.Class) && s.Level == staleness.Expired && s.Action != staleness.ServeStale {
			return fmt.Errorf("%w: %s", errStale, s.Reason)
		}
	}
	return nil
}

// routing reports whether c is a class whose expiry fails requests closed. Expired
// endpoints set to failClosed or drop fail routing closed too: an endpoint set that
// may no longer be trusted (or is dropped) leaves nothing to send a request to, and
// answering 503 with the reason says so where a silent empty set would not.
// (secrets, revocation and authorization act on handshakes and policy: issue #9.)
func routing(c staleness.Class) bool {
	return c == staleness.Listeners || c == staleness.Routes || c == staleness.Clusters || c == staleness.Endpoints
}
