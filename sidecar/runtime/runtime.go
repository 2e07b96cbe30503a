// Package runtime owns what a sidecar serves with: it activates a candidate xDS
// state only when it is whole (matched by the manifest pilot signed for this
// node), swaps the compiled *dataplane.Config in with one atomic store, persists
// it as the signed last-known-good, reuses that snapshot on a start without
// pilot, and turns the age of the state into per-class staleness verdicts the
// request path reads with one atomic load.
//
// The xDS client calls Decode and Apply from its stream goroutine; the sidecar's
// ticker calls Tick; the request path calls Load and Degraded. Everything the
// admin endpoints show comes from Dump, an immutable value.
package runtime

import (
	"context"
	"crypto/ed25519"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"net/netip"
	"slices"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hashicorp/go-hclog"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/anypb"

	"github.com/weft-mesh/weft/certs/bundle"
	"github.com/weft-mesh/weft/certs/manifest"
	"github.com/weft-mesh/weft/certs/manifest/manifestpb"
	"github.com/weft-mesh/weft/certs/spiffe"
	"github.com/weft-mesh/weft/sidecar/dataplane"
	"github.com/weft-mesh/weft/sidecar/runtime/lkg"
	"github.com/weft-mesh/weft/sidecar/runtime/staleness"
	"github.com/weft-mesh/weft/sidecar/xdsclient"
	"github.com/weft-mesh/weft/sidecar/xdsresource"
)

// Defaults.
const (
	DefaultPersistEvery = 30 * time.Second
	DefaultTrustDomain  = "cluster.local"
)

// Sources of an active configuration.
const (
	SourceXDS = "xds"
	SourceLKG = "last-known-good"
)

// ErrConfig wraps every configuration error from New.
var ErrConfig = errors.New("runtime: invalid config")

// Config of a Runtime; checked by New.
type Config struct {
	NodeID string
	// TrustRoots are the --ca-root roots: a manifest is trusted when its
	// publisher certificate (spiffe://<TrustDomain>/weft/publisher) verifies
	// under them united with the last trust bundle pilot delivered (the ROOTCA
	// Secret), so publisher keys rotate without touching sidecars and a root
	// rotation reaches them over xDS (sidecar/runtime/lkg/trust.go).
	TrustRoots *bundle.Bundle
	// TrustDomain is the mesh's (--trust-domain); DefaultTrustDomain when empty.
	TrustDomain string
	// PublisherKey pins the publisher key (--publisher-key): with TrustRoots the
	// certified key must also be this one; alone it verifies manifests with or
	// without a chain (publishers before the CA). One of TrustRoots and
	// PublisherKey is required unless InsecureSkipManifest.
	PublisherKey ed25519.PublicKey
	// InsecureSkipManifest activates every complete candidate without a signed
	// manifest (interop with plain xDS servers). Nothing is persisted then: an
	// unsigned snapshot could not be trusted again after a restart.
	InsecureSkipManifest bool
	// StateDir holds the last-known-good snapshot.
	StateDir string
	// Overrides are the operator's per-class staleness policies (--staleness): a
	// class present here ignores what pilot delivers; the others follow pilot's
	// StalenessPolicy, else the defaults (see PolicyOverride). Nil: none.
	Overrides staleness.Set
	Logger    hclog.Logger
	// Metrics, if set, is updated on activations, refusals and ticks.
	Metrics *Metrics
	// PersistEvery bounds how often a newer lastConfirmed alone is written to disk
	// (every activation is written at once). Default 30s.
	PersistEvery time.Duration
	// Compile builds a candidate; nil means dataplane.Compile.
	Compile func(state map[string]map[string]any) (*dataplane.Config, error)
	// Save writes a last-known-good snapshot; nil means lkg.Save. It runs on the
	// runtime's own writer goroutine, never under its lock (tests inject a slow
	// one to show activation does not wait for the disk).
	Save func(dir string, s *lkg.Snapshot) error
	// Now is the clock; default time.Now.
	Now func() time.Time
	// AppAddress, when valid, replaces 127.0.0.1 in the endpoints of inbound
	// clusters ("inbound|..."): pilot addresses the application on localhost, and
	// side-by-side workloads on one machine each have their own loopback address.
	AppAddress netip.Addr
}

// Runtime holds the active configuration. Create with New.
type Runtime struct {
	cfg  Config
	log  hclog.Logger
	seed uint64

	// Read by the request path and admin, written under mu.
	active   atomic.Pointer[dataplane.Config]
	dump     atomic.Pointer[Dump]
	degraded atomic.Pointer[string] // reason when routing fails closed; nil otherwise
	// authzExpired: reason when authorization fails closed; nil otherwise.
	authzExpired atomic.Pointer[string]
	// confirmedNs is lastConfirmed (UnixNano, 0 for never) as of the latest Tick or
	// publish: Dump computes ages from it without a publish per tick.
	confirmedNs atomic.Int64
	// trust verifies manifests from pilot: the --ca-root roots united with the
	// last delivered bundle its path proves, and the pin. Written under mu (on
	// activation and start), read by Decode on the stream goroutine.
	trust atomic.Pointer[manifest.Trust]
	// tickSkew is the latest Tick's now minus the clock's (0 in production), so
	// Dump judges at the time Tick was told plus what has passed since.
	tickSkew atomic.Int64
	// lastActivation is how long the latest xDS activation took, in nanoseconds
	// (see LastActivation).
	lastActivation atomic.Int64
	// decodeNs is the time Decode spent on resources since the latest candidate
	// had an outcome other than "not yet covered": the decoding part of the next
	// activation. Added by Decode, taken by Apply (both on the stream goroutine).
	decodeNs atomic.Int64

	// mu serialises Apply, Tick and the last-known-good start; it guards the fields
	// below, which only those hold.
	mu            sync.Mutex
	cur           *activeState // what is active; nil before the first activation
	lastConfirmed time.Time    // latest confirmation of cur (stream, activation or file)
	pending       string       // why the latest candidate is not active
	notReady      string       // why nothing is active
	lkgInfo       LKGInfo
	lkgCand       *lkgCandidate // verified persisted snapshot, not yet activated
	savedConfirm  time.Time     // lastConfirmed handed to the writer with the last save
	saveSeq       uint64        // saves handed to the writer so far
	savedSeq      uint64        // newest save whose outcome lkgInfo shows
	// hashes are the content hashes of the latest candidate's resources by their
	// Raw (what the xDS client holds, unchanged until the resource is): each
	// resource is hashed once, not on every Apply of a push (see content).
	hashes map[*anypb.Any][32]byte
	toSave *pendingSave // built under mu, handed to the writer after unlock
	// trustPath leads from the --ca-root roots to trust (Follow(base, trustPath)
	// is *trust): the active manifest's path plus its own bundle when it
	// delivered one.
	trustPath []lkg.Endorsement
	states    []staleness.State
	counters  Counters

	saver saver // writes last-known-good files off mu
}

// activeState is the active configuration with what identifies it.
type activeState struct {
	cfg       *dataplane.Config
	digest    string // over every (type, name, content hash) except the manifest
	versions  map[string]string
	resources []lkg.Resource
	signed    *manifestpb.SignedManifest // nil in insecure mode
	m         *manifest.Manifest
	path      []lkg.Endorsement // trust path of signed, persisted with it
	policy    *policy           // staleness policy in force with this configuration
	source    string
	at        time.Time
	// current: pilot confirmed this content current for its stream (the
	// manifest binding says so; always in insecure mode). A configuration from
	// pilot that is not current is served but the sidecar is not ready on it.
	current bool
}

type lkgCandidate struct {
	state  *activeState
	update *xdsclient.Update
}

// New checks cfg.
func New(cfg Config) (*Runtime, error) {
	switch {
	case cfg.NodeID == "":
		return nil, fmt.Errorf("%w: NodeID required", ErrConfig)
	case cfg.Logger == nil:
		return nil, fmt.Errorf("%w: Logger required", ErrConfig)
	case cfg.StateDir == "":
		return nil, fmt.Errorf("%w: StateDir required", ErrConfig)
	case cfg.PublisherKey != nil && len(cfg.PublisherKey) != ed25519.PublicKeySize:
		return nil, fmt.Errorf("%w: PublisherKey: %d bytes, want %d", ErrConfig, len(cfg.PublisherKey), ed25519.PublicKeySize)
	case !cfg.InsecureSkipManifest && cfg.PublisherKey == nil && cfg.TrustRoots == nil:
		return nil, fmt.Errorf("%w: TrustRoots (--ca-root) or PublisherKey (--publisher-key) required to verify manifests (or InsecureSkipManifest)", ErrConfig)
	case cfg.PersistEvery < 0:
		return nil, fmt.Errorf("%w: PersistEvery %s is negative", ErrConfig, cfg.PersistEvery)
	}
	for c, p := range cfg.Overrides {
		if p.Class != c {
			return nil, fmt.Errorf("%w: Overrides[%s]: policy is for class %q", ErrConfig, c, p.Class)
		}
		if err := p.Check(); err != nil {
			return nil, fmt.Errorf("%w: Overrides[%s]: %v", ErrConfig, c, err)
		}
	}
	if cfg.TrustDomain == "" {
		cfg.TrustDomain = DefaultTrustDomain
	}
	if _, err := spiffe.Publisher(cfg.TrustDomain); err != nil {
		return nil, fmt.Errorf("%w: TrustDomain: %v", ErrConfig, err)
	}
	if cfg.PersistEvery == 0 {
		cfg.PersistEvery = DefaultPersistEvery
	}
	if cfg.Compile == nil {
		cfg.Compile = dataplane.Compile
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	if cfg.Save == nil {
		cfg.Save = lkg.Save
	}
	r := &Runtime{cfg: cfg, log: cfg.Logger, seed: staleness.Seed(cfg.NodeID),
		notReady: "no configuration yet: waiting for pilot"}
	r.saver.r = r
	base := r.baseTrust()
	r.trust.Store(&base)
	r.lkgInfo.Path = lkgPath(cfg.StateDir)
	r.publishLocked()
	return r, nil
}

// Load returns the active configuration, nil before the first activation. The
// request path calls it once per request or connection.
func (r *Runtime) Load() *dataplane.Config { return r.active.Load() }

// Degraded reports whether routing must fail closed and why (one atomic load); it
// is the request path's httpproxy.DegradedFunc.
func (r *Runtime) Degraded() (string, bool) {
	if p := r.degraded.Load(); p != nil {
		return *p, true
	}
	return "", false
}

// baseTrust is what the sidecar trusts by its own configuration: --ca-root and
// the pin.
func (r *Runtime) baseTrust() manifest.Trust {
	return manifest.Trust{Roots: r.cfg.TrustRoots, TrustDomain: r.cfg.TrustDomain, Pin: r.cfg.PublisherKey}
}

// DeliveredRoots is the trust bundle pilot last delivered that the sidecar
// accepted (through a manifest it trusts), united with --ca-root; nil before
// any, or without --ca-root. The xDS client's TLS to pilot trusts it too, so a
// rotated root is followed without a restart.
func (r *Runtime) DeliveredRoots() *bundle.Bundle {
	t := r.trust.Load()
	if t == nil || t.Roots == r.cfg.TrustRoots {
		return nil
	}
	return t.Roots
}

// Types lists the xDS types the sidecar subscribes to, in push order: the four
// Envoy types with LEDS's LbEndpoints after EDS (wildcard: pilot sends them
// to a node that advertises node.FeatureLEDS, all of its scope's) and SDS
// Secrets (by name: ROOTCA, which every manifest
// references, and what listeners and clusters reference), then, unless
// manifests are skipped (a plain xDS server), the StalenessPolicy pilot
// delivers (wildcard: one per sidecar; without it the defaults apply) and the
// manifest last.
func (r *Runtime) Types() []string {
	ts := []string{xdsclient.TypeCluster, xdsclient.TypeEndpoint, xdsresource.LbEndpointType, xdsclient.TypeListener, xdsclient.TypeRoute, xdsclient.TypeSecret}
	if !r.cfg.InsecureSkipManifest {
		ts = append(ts, xdsresource.StalenessType, manifest.TypeURL)
	}
	return ts
}

// Manifest is a decoded and verified manifest resource as the xDS client holds it.
type Manifest struct {
	Signed   *manifestpb.SignedManifest
	Verified *manifest.Manifest // nil in insecure mode
}

// References names the ROOTCA Secret: SDS is subscribed by name, and every
// manifest may cover the trust bundle whether or not a listener or cluster
// references it (a sidecar without mTLS still trusts publishers through it).
func (m *Manifest) References() (string, []string) {
	return xdsclient.TypeSecret, []string{manifest.RootCAName}
}

// Decode is the xDS client's DecodeFunc: Envoy types through xdsresource, the
// ROOTCA Secret's bundle checked, the manifest verified against the trusted
// publishers (trust), node and validity (a failure is a NACK naming the check).
// Its time counts in the next activation's (LastActivation).
func (r *Runtime) Decode(typeURL string, a *anypb.Any) (string, any, error) {
	began := time.Now()
	name, v, err := r.decode(typeURL, a)
	r.decodeNs.Add(int64(time.Since(began)))
	return name, v, err
}

// decode is Decode without the time accounted (last-known-good start).
func (r *Runtime) decode(typeURL string, a *anypb.Any) (string, any, error) {
	if typeURL == xdsclient.TypeSecret {
		return DecodeSecret(a)
	}
	if typeURL != manifest.TypeURL {
		name, v, err := xdsresource.Decode(typeURL, a)
		if c, ok := v.(*xdsresource.Cluster); ok && err == nil {
			v = r.localApp(c)
		}
		return name, v, err
	}
	sm, err := manifest.Decode(a.GetValue())
	if err != nil {
		return manifest.Name, nil, fmt.Errorf("manifest: %w", err)
	}
	if r.cfg.InsecureSkipManifest {
		return manifest.Name, &Manifest{Signed: sm}, nil
	}
	m, err := r.trust.Load().Verify(sm, r.cfg.NodeID, r.cfg.Now())
	if err != nil {
		return manifest.Name, nil, fmt.Errorf("manifest refused (%s): %w", Check(err), err)
	}
	return manifest.Name, &Manifest{Signed: sm, Verified: m}, nil
}

var localhost = netip.AddrFrom4([4]byte{127, 0, 0, 1})

// localApp points an inbound cluster's localhost endpoints at AppAddress. The
// decoded value is shared and immutable, so it is copied.
func (r *Runtime) localApp(c *xdsresource.Cluster) *xdsresource.Cluster {
	app := r.cfg.AppAddress
	if !app.IsValid() || app == localhost || c.Static == nil || !strings.HasPrefix(c.Name, "inbound|") {
		return c
	}
	out := *c
	eps := *c.Static
	eps.Endpoints = append([]xdsresource.Endpoint(nil), c.Static.Endpoints...)
	for i, e := range eps.Endpoints {
		if e.Addr.Addr() == localhost {
			eps.Endpoints[i].Addr = netip.AddrPortFrom(app, e.Addr.Port())
		}
	}
	out.Static = &eps
	return &out
}

// Apply is the xDS client's ApplyFunc. A candidate that the signed manifest does
// not (yet) cover is accepted but not activated: it is an intermediate step of a
// push and the manifest, sent last, completes it. A covered candidate is compiled
// and swapped in; a compile failure is a NACK and the old configuration keeps
// serving. The already active content is a no-op. A covered candidate that pilot
// did not confirm current (its manifest binding says so) is activated, since it
// is the best pilot has, but the sidecar is not ready on it. The last-known-good
// file is written after the lock is released, by the runtime's writer.
func (r *Runtime) Apply(_ context.Context, u *xdsclient.Update) error {
	r.mu.Lock()
	err := r.applyLocked(u)
	save := r.takeSaveLocked()
	r.mu.Unlock()
	r.saver.offer(save)
	return err
}

func (r *Runtime) applyLocked(u *xdsclient.Update) error {
	began := time.Now() // activation duration: wall time, not the injectable clock
	// What was decoded for this candidate; kept for the next one when this one
	// is not yet covered (its resources are then part of that one).
	decoded := time.Duration(r.decodeNs.Swap(0))
	pending := func(why string) error {
		r.decodeNs.Add(int64(decoded))
		r.setPendingLocked(why)
		return nil
	}
	now := r.cfg.Now()
	digest, hashes, raw := r.content(u)
	var mv *Manifest
	if !r.cfg.InsecureSkipManifest {
		res, ok := u.Resources[manifest.TypeURL][manifest.Name]
		if !ok {
			return pending("waiting for the signed manifest")
		}
		mv, _ = res.Value.(*Manifest)
		if mv == nil || mv.Verified == nil {
			return fmt.Errorf("manifest: %w: value is %T", manifest.ErrMalformed, res.Value)
		}
		if !now.Before(mv.Verified.ValidUntil) {
			// Verified when it arrived, expired since: pilot should have re-signed.
			return pending(fmt.Sprintf("manifest revision %d expired at %s; waiting for a new one", mv.Verified.Revision, mv.Verified.ValidUntil.UTC().Format(time.RFC3339)))
		}
		if err := mv.Verified.Match(hashes, manifest.TypeURL); err != nil {
			return pending(fmt.Sprintf("candidate not yet covered by manifest revision %d: %v", mv.Verified.Revision, err))
		}
	} else if missing := missingNames(u); missing != "" {
		return pending("warming: waiting for " + missing)
	}
	current := mv == nil || mv.Verified.Current
	if cur := r.cur; cur != nil && cur.digest == digest {
		if mv == nil || proto.Equal(cur.signed, mv.Signed) {
			r.counters.NoOps++
			r.lastConfirmed = now
			r.pending = ""
			r.publishLocked()
			return nil
		}
		// Same resources signed at a lower revision (a lagging or regressed
		// pilot): nothing served changes, and the manifest kept is the newer
		// one, so the active revision never goes down.
		if cur.m != nil && Backwards(cur.m, mv.Verified) != nil {
			r.counters.NoOps++
			r.lastConfirmed, r.pending = now, ""
			r.publishLocked()
			return nil
		}
		// Same resources, re-signed manifest (new validity, a new stream's
		// binding, or another publisher: a new key, a renewed certificate):
		// keep the compiled config, record and persist the new manifest.
		// Content once confirmed current stays so: a new stream whose wait
		// timed out offering the same content says nothing older.
		step, err := r.trustStepLocked(u, mv, now)
		if err != nil {
			r.log.Warn("manifest refused, previous configuration keeps serving", "error", err)
			return fmt.Errorf("manifest refused (%s): %w", Check(err), err)
		}
		r.applyTrustLocked(step)
		next := *cur
		next.signed, next.m, next.versions, next.resources = mv.Signed, mv.Verified, copyVersions(u.Versions), raw
		if step != nil {
			next.path = step.path
		}
		next.current = cur.current || current
		r.cur, r.lastConfirmed, r.pending = &next, now, ""
		r.counters.NoOps++
		r.persistLocked(now)
		r.publishLocked()
		return nil
	}
	if cur := r.cur; mv != nil && cur != nil && cur.m != nil {
		if err := Backwards(cur.m, mv.Verified); err != nil {
			r.counters.Backwards++
			r.log.Warn("candidate refused, previous configuration keeps serving", "error", err)
			return err
		}
	}
	state := make(map[string]map[string]any, len(u.Resources))
	for typ, byName := range u.Resources {
		if typ == manifest.TypeURL {
			continue
		}
		m := make(map[string]any, len(byName))
		for n, res := range byName {
			m[n] = res.Value
		}
		state[typ] = m
	}
	step, err := r.trustStepLocked(u, mv, now)
	if err != nil {
		r.counters.Rejected++
		r.log.Warn("manifest refused, previous configuration keeps serving", "error", err)
		r.pending = "latest candidate refused: " + err.Error()
		r.publishLocked()
		return fmt.Errorf("manifest refused (%s): %w", Check(err), err)
	}
	cfg, err := r.cfg.Compile(state)
	if err != nil {
		r.counters.Rejected++
		if r.cfg.Metrics != nil {
			r.cfg.Metrics.rejected.Inc()
		}
		r.log.Warn("candidate refused, previous configuration keeps serving", "error", err)
		// What serves is no longer what pilot wants: confirmations of the stream do
		// not make it fresh.
		r.pending = "latest candidate refused: " + err.Error()
		r.publishLocked()
		return fmt.Errorf("activation: %w", err)
	}
	st := &activeState{cfg: cfg, digest: digest, versions: copyVersions(u.Versions), resources: raw, source: SourceXDS, at: now,
		policy: effectivePolicy(r.cfg.Overrides, deliveredPolicy(state)), current: current}
	if mv != nil {
		st.signed, st.m = mv.Signed, mv.Verified
	}
	if step != nil {
		st.path = step.path
	}
	r.applyTrustLocked(step)
	r.activateLocked(st, now)
	took := decoded + time.Since(began)
	r.lastActivation.Store(int64(took))
	if r.cfg.Metrics != nil {
		r.cfg.Metrics.activationDuration.Observe(took.Seconds())
	}
	r.persistLocked(now)
	r.publishLocked()
	return nil
}

// LastActivation is how long the latest activation from xDS took: decoding its
// resources that arrived since the previous candidate's outcome (in Decode, as
// they arrived: the gaps between responses are not counted), then in Apply
// hashing the candidate, checking it against the manifest, compiling it and
// swapping it in (persisting it as last-known-good follows and is not counted).
// Zero before the first. weft_sidecar_activation_duration_seconds has them all.
func (r *Runtime) LastActivation() time.Duration { return time.Duration(r.lastActivation.Load()) }

// activateLocked swaps st in. The old *dataplane.Config is retired by the garbage
// collector once the last request or connection that loaded it finishes: nothing
// in it needs closing (upstream pools outlive configs). The new one's settings are
// then applied to the long-lived per-Service state and what it no longer references
// is retired (dataplane.Config.Activate).
func (r *Runtime) activateLocked(st *activeState, confirmed time.Time) {
	r.active.Store(st.cfg)
	st.cfg.Activate()
	r.cur = st
	r.lkgCand = nil
	if confirmed.After(r.lastConfirmed) {
		r.lastConfirmed = confirmed
	}
	r.pending, r.notReady = "", ""
	r.counters.Activations++
	if r.cfg.Metrics != nil {
		r.cfg.Metrics.activations.WithLabelValues(st.source).Inc()
	}
	rev := int64(0)
	if st.m != nil {
		rev = st.m.Revision
	}
	if st.source == SourceXDS && !st.current {
		r.log.Warn("configuration activated, not ready on it: pilot did not confirm it current", "revision", rev,
			"stream_revision", st.m.StreamRevision, "resources", len(st.resources))
	} else {
		r.log.Info("configuration activated", "source", st.source, "revision", rev, "resources", len(st.resources))
	}
	r.evaluateLocked(r.cfg.Now())
}

func (r *Runtime) setPendingLocked(why string) {
	if r.pending != why {
		r.log.Debug("candidate accepted, not activated", "reason", why)
	}
	r.pending = why
	r.publishLocked()
}

// persistLocked queues the active state to be written as last-known-good: the
// caller hands it to the writer (takeSaveLocked, then saver.offer) once it has
// released mu, so no disk I/O ever runs under the lock. Only a snapshot that is
// signed and known good (pilot confirmed it current, or it was loaded from a
// verified file) is persisted. A write failure is logged and shown, not fatal
// (the configuration is active either way).
func (r *Runtime) persistLocked(now time.Time) {
	if r.cur == nil || r.cur.signed == nil || (r.cur.source == SourceXDS && !r.cur.current) {
		return
	}
	r.saveSeq++
	r.toSave = &pendingSave{seq: r.saveSeq, at: now,
		snap: &lkg.Snapshot{NodeID: r.cfg.NodeID, Resources: r.cur.resources, Manifest: r.cur.signed, LastConfirmed: r.lastConfirmed, Trust: r.cur.path}}
	r.savedConfirm = r.lastConfirmed
}

// takeSaveLocked returns (and clears) the save persistLocked queued, if any.
func (r *Runtime) takeSaveLocked() *pendingSave {
	p := r.toSave
	r.toSave = nil
	return p
}

// saved records the outcome of save seq, unless a newer one's is already shown.
func (r *Runtime) saved(seq uint64, at time.Time, err error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if seq <= r.savedSeq {
		return
	}
	r.savedSeq = seq
	if err != nil {
		r.lkgInfo.LastError = err.Error()
		r.log.Error("persist last-known-good", "error", err)
	} else {
		r.lkgInfo.SavedAt, r.lkgInfo.LastError = at, ""
	}
	r.publishLocked()
}

// Flush waits until every last-known-good write queued so far has finished. The
// sidecar calls it on shutdown so the final snapshot is on disk.
func (r *Runtime) Flush() { r.saver.flush() }

// content is contentOf(u) with each resource hashed once: a resource the
// previous candidate had (the same Raw: the xDS client keeps it until the
// resource changes) keeps its hash. Called under mu.
func (r *Runtime) content(u *xdsclient.Update) (string, map[string]map[string][32]byte, []lkg.Resource) {
	n := 0
	for _, byName := range u.Resources {
		n += len(byName)
	}
	seen := make(map[*anypb.Any][32]byte, n)
	hash := func(a *anypb.Any) [32]byte {
		h, ok := r.hashes[a]
		if !ok {
			h = hashRaw(a)
		}
		seen[a] = h
		return h
	}
	d, hashes, raw := contentOf(u, hash)
	r.hashes = seen
	return d, hashes, raw
}

func hashRaw(a *anypb.Any) [32]byte { return manifest.Hash(a.GetValue()) }

// contentOf returns the candidate's digest (every non-manifest resource's type,
// name and content hash by hash), the hashes by type and name, and the raw
// resources to persist.
func contentOf(u *xdsclient.Update, hash func(*anypb.Any) [32]byte) (string, map[string]map[string][32]byte, []lkg.Resource) {
	hashes := make(map[string]map[string][32]byte, len(u.Resources))
	n := 0
	for _, byName := range u.Resources {
		n += len(byName)
	}
	raw := make([]lkg.Resource, 0, n)
	for typ, byName := range u.Resources {
		if typ == manifest.TypeURL {
			continue
		}
		m := make(map[string][32]byte, len(byName))
		for n, res := range byName {
			m[n] = hash(res.Raw)
			raw = append(raw, lkg.Resource{TypeURL: typ, Name: n, Version: res.Version, Value: res.Raw.GetValue()})
		}
		hashes[typ] = m
	}
	for _, res := range u.Resources[manifest.TypeURL] {
		raw = append(raw, lkg.Resource{TypeURL: manifest.TypeURL, Name: res.Name, Version: res.Version, Value: res.Raw.GetValue()})
	}
	sort.Slice(raw, func(i, j int) bool {
		if raw[i].TypeURL != raw[j].TypeURL {
			return raw[i].TypeURL < raw[j].TypeURL
		}
		return raw[i].Name < raw[j].Name
	})
	h := sha256.New()
	for _, res := range raw {
		if res.TypeURL == manifest.TypeURL {
			continue
		}
		sum := hashes[res.TypeURL][res.Name]
		h.Write([]byte(res.TypeURL))
		h.Write([]byte{0})
		h.Write([]byte(res.Name))
		h.Write([]byte{0})
		h.Write(sum[:])
	}
	return hex.EncodeToString(h.Sum(nil)[:12]), hashes, raw
}

func missingNames(u *xdsclient.Update) string {
	var out []string
	for typ, names := range u.Missing {
		for _, n := range names {
			out = append(out, xdsclient.ShortName(typ)+" "+n)
		}
	}
	slices.Sort(out)
	if len(out) > 5 {
		out = append(out[:5], fmt.Sprintf("and %d more", len(out)-5))
	}
	if len(out) == 0 {
		return ""
	}
	return fmt.Sprint(out)
}

func copyVersions(v map[string]string) map[string]string {
	out := make(map[string]string, len(v))
	for k, s := range v {
		out[k] = s
	}
	return out
}

// Check names the check a manifest or last-known-good error failed, for the one
// log line and the readiness body.
func Check(err error) string {
	switch {
	case errors.Is(err, lkg.ErrNoSnapshot):
		return "no snapshot"
	case errors.Is(err, lkg.ErrTrustPath):
		return "trust path"
	case errors.Is(err, manifest.ErrNoChain), errors.Is(err, manifest.ErrChain):
		return "publisher chain"
	case errors.Is(err, manifest.ErrPublisherID):
		return "publisher identity"
	case errors.Is(err, manifest.ErrPublisherExpired):
		return "publisher certificate validity"
	case errors.Is(err, manifest.ErrPublisherRevoked):
		return "publisher revocation"
	case errors.Is(err, manifest.ErrKey):
		return "publisher key"
	case errors.Is(err, manifest.ErrSignature):
		return "signature"
	case errors.Is(err, manifest.ErrNode):
		return "node"
	case errors.Is(err, manifest.ErrScope):
		return "scope"
	case errors.Is(err, manifest.ErrExpired), errors.Is(err, manifest.ErrNotYet):
		return "validity"
	case errors.Is(err, manifest.ErrMismatch):
		return "digest"
	case errors.Is(err, manifest.ErrMalformed):
		return "format"
	case errors.Is(err, errStale):
		return "staleness"
	case errors.Is(err, xdsresource.ErrInvalid), errors.Is(err, dataplane.ErrInvalid):
		return "content"
	}
	return "read"
}

// ErrBackwards is content older than what the sidecar runs.
var ErrBackwards = errors.New("content older than the active configuration")

// Backwards refuses next when it would move the sidecar backwards: a store
// revision lower than cur's within the same rollback epoch, or an older epoch.
// A deliberate regression comes with a higher epoch (pilot
// --accept-store-regression), and then any revision is taken. Content with
// the same resources never reaches here (it is a no-op, whatever revision it
// is signed at).
func Backwards(cur, next *manifest.Manifest) error {
	switch {
	case next.RollbackEpoch < cur.RollbackEpoch:
		return fmt.Errorf("%w: manifest rollback epoch %d is older than the active %d (revision %d): refused, the active configuration keeps serving", ErrBackwards, next.RollbackEpoch, cur.RollbackEpoch, next.Revision)
	case next.RollbackEpoch == cur.RollbackEpoch && next.Revision < cur.Revision:
		return fmt.Errorf("%w: manifest revision %d is lower than the active revision %d (rollback epoch %d): refused, the active configuration keeps serving; pilot's store went backwards (for a deliberate restore, pilot --accept-store-regression raises the epoch)", ErrBackwards, next.Revision, cur.Revision, cur.RollbackEpoch)
	}
	return nil
}
