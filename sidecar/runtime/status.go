package runtime

import (
	"encoding/hex"
	"fmt"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/weft-mesh/weft/sidecar/runtime/staleness"
)

// Dump is an immutable picture of the runtime for /config_dump and readiness.
type Dump struct {
	NodeID string `json:"nodeId"`
	Ready  bool   `json:"ready"`
	// Reason says why the sidecar is not ready; empty when ready.
	Reason string      `json:"reason,omitempty"`
	Active *ActiveInfo `json:"active,omitempty"`
	// Pending says why the latest accepted candidate is not active (an intermediate
	// push step waiting for its manifest); empty when the active state is current.
	Pending       string       `json:"pending,omitempty"`
	LastConfirmed time.Time    `json:"lastConfirmed,omitzero"`
	Staleness     []ClassState `json:"staleness"`
	LastKnownGood LKGInfo      `json:"lastKnownGood"`
	Counters      Counters     `json:"counters"`

	// Read-time inputs (see Runtime.Dump): the policy judging the active
	// configuration (nil while none is), and whether routing failed closed.
	pol        *policy
	failClosed bool
}

// ActiveInfo describes the active configuration.
type ActiveInfo struct {
	Source      string            `json:"source"` // SourceXDS or SourceLKG
	ActivatedAt time.Time         `json:"activatedAt"`
	Digest      string            `json:"digest"` // over every resource's type, name and content hash
	Revision    int64             `json:"revision"`
	Versions    map[string]string `json:"versions"`  // type URL -> version of the accepted response
	Resources   map[string]int    `json:"resources"` // type URL -> count
	Manifest    *ManifestInfo     `json:"manifest,omitempty"`
	// Current: pilot confirmed this content current for the stream it came on
	// (always for an unsigned, insecure configuration). A configuration from
	// pilot that is not current is served, but the sidecar is not ready on it.
	Current bool `json:"current"`
}

// ManifestInfo describes the signed manifest covering the active configuration.
type ManifestInfo struct {
	Revision   int64     `json:"revision"`
	IssuedAt   time.Time `json:"issuedAt"`
	ValidUntil time.Time `json:"validUntil"`
	KeyID      string    `json:"keyId"`
	Resources  int       `json:"resources"` // how many resources the digest covers
	Scope      string    `json:"scope,omitempty"`
	Digest     string    `json:"digest,omitempty"` // hex sha256 committing to every covered resource
	// Current and StreamRevision are the binding's: whether pilot confirmed the
	// content current, and the store revision when the stream opened.
	Current        bool  `json:"current"`
	StreamRevision int64 `json:"streamRevision"`
	// Publisher is the verified publisher certificate (SPIFFE ID, serial,
	// NotAfter); empty when the manifest was accepted by the pinned key alone.
	Publisher         string    `json:"publisher,omitempty"`
	PublisherSerial   string    `json:"publisherSerial,omitempty"`
	PublisherNotAfter time.Time `json:"publisherNotAfter,omitzero"`
	// TrustPath is how many delivered bundles (root rotations) lie between the
	// sidecar's --ca-root and the root the publisher is certified under.
	TrustPath int `json:"trustPath,omitempty"`
}

// LKGInfo describes the persisted last-known-good snapshot.
type LKGInfo struct {
	Path      string    `json:"path"`
	SavedAt   time.Time `json:"savedAt,omitzero"`
	LastError string    `json:"lastError,omitempty"`
	// Loaded is the verdict on the file found at start: "verified", "none" or
	// "refused (<check>): <error>".
	Loaded string `json:"loaded,omitempty"`
}

// ClassState is one class's staleness verdict.
type ClassState struct {
	Class      string    `json:"class"`
	Level      string    `json:"level"`
	Age        string    `json:"age"`
	AgeSeconds float64   `json:"ageSeconds"`
	ExpiresAt  time.Time `json:"expiresAt,omitzero"`
	Action     string    `json:"action,omitempty"`
	Reason     string    `json:"reason"`
	// Policy is the policy judging the class and its source (override, pilot,
	// default).
	Policy PolicyInfo `json:"policy"`
}

// Counters count activation outcomes since start.
type Counters struct {
	Activations uint64 `json:"activations"`
	Rejected    uint64 `json:"rejected"` // candidates that failed to compile (NACKed)
	NoOps       uint64 `json:"noOps"`    // candidates equal to the active configuration
	// Backwards: candidates refused as older than the active configuration
	// (a lower revision in the same rollback epoch; NACKed).
	Backwards uint64 `json:"backwards"`
}

// Dump returns the picture at the time of the call (never nil). The published
// part changes only when something but time does (activation, level, fail-closed
// verdict, persistence), so an idle sidecar builds nothing per tick; what time
// alone moves (lastConfirmed, ages, expiry times, the reasons quoting ages) is
// computed here, from lastConfirmed as of the latest Tick, at the latest Tick's
// now plus the time the runtime clock says has passed since (the same as the
// clock in production; tests drive Tick's now directly).
func (r *Runtime) Dump() *Dump {
	d := *r.dump.Load()
	d.LastConfirmed = r.loadConfirmed()
	if d.pol != nil {
		now := r.cfg.Now().Add(time.Duration(r.tickSkew.Load()))
		d.Staleness = classStates(d.pol.set.EvaluateAll(d.LastConfirmed, nil, now, r.seed), d.pol)
	}
	if d.failClosed {
		if why := r.degraded.Load(); why != nil {
			d.Reason = "routing fails closed: " + *why
		}
	}
	return &d
}

// classStates renders staleness verdicts for the dump.
func classStates(states []staleness.State, pol *policy) []ClassState {
	out := make([]ClassState, 0, len(states))
	for _, s := range states {
		out = append(out, ClassState{Class: string(s.Class), Level: s.Level.String(), Age: s.Age.Round(time.Millisecond).String(),
			AgeSeconds: s.Age.Seconds(), ExpiresAt: s.ExpiresAt, Action: string(s.Action), Reason: s.Reason, Policy: pol.info(s.Class)})
	}
	return out
}

// storeConfirmed publishes lastConfirmed to Dump's readers (0: never).
func (r *Runtime) storeConfirmed() {
	var n int64
	if !r.lastConfirmed.IsZero() {
		n = r.lastConfirmed.UnixNano()
	}
	r.confirmedNs.Store(n)
}

func (r *Runtime) loadConfirmed() time.Time {
	if n := r.confirmedNs.Load(); n != 0 {
		return time.Unix(0, n)
	}
	return time.Time{}
}

// notCurrentReason is the readiness reason while the active configuration from
// pilot is not confirmed current.
func notCurrentReason(c *activeState) string {
	return fmt.Sprintf("configuration not current: pilot sent revision %d without confirming it current "+
		"(the store was at revision %d when the stream opened and pilot's compile of it did not come in time); "+
		"serving it, not ready until pilot confirms a current snapshot", c.m.Revision, c.m.StreamRevision)
}

// Ready reports readiness and its reason: not ready until a configuration is
// active, not ready on a configuration pilot did not confirm current (a verified
// last-known-good counts as current), and not ready while routing fails closed
// on expiry.
func (r *Runtime) Ready() (bool, string) {
	d := r.Dump()
	if !d.Ready {
		return false, d.Reason
	}
	var b strings.Builder
	b.WriteString("ready")
	for _, s := range d.Staleness {
		if s.Level != staleness.Fresh.String() {
			b.WriteString("\n" + s.Reason)
		}
	}
	return true, b.String()
}

// Tick re-judges staleness at now. confirmed is the xDS client's LastConfirmed:
// it counts only while the active configuration is the client's current state
// (nothing pending), since a confirmation of a state not yet active says nothing
// about the one serving. Tests drive now directly.
func (r *Runtime) Tick(now, confirmed time.Time) []staleness.State {
	r.mu.Lock()
	states := r.tickLocked(now, confirmed)
	save := r.takeSaveLocked()
	r.mu.Unlock()
	r.saver.offer(save)
	return states
}

func (r *Runtime) tickLocked(now, confirmed time.Time) []staleness.State {
	if r.cur != nil && r.pending == "" && confirmed.After(r.lastConfirmed) {
		r.lastConfirmed = confirmed
	}
	prev, prevFailClosed, prevLKG := r.states, r.degraded.Load() != nil, r.lkgInfo
	r.evaluateLocked(now)
	if r.cur != nil && r.lastConfirmed.Sub(r.savedConfirm) >= r.cfg.PersistEvery {
		r.persistLocked(now)
	}
	r.tickSkew.Store(int64(now.Sub(r.cfg.Now())))
	r.storeConfirmed()
	// Ages are Dump's to compute: publish only what a tick changed otherwise.
	if levelsChanged(prev, r.states) || prevFailClosed != (r.degraded.Load() != nil) || prevLKG != r.lkgInfo {
		r.publishLocked()
	}
	return r.states
}

// levelsChanged says whether two evaluations differ in more than time.
func levelsChanged(a, b []staleness.State) bool {
	if len(a) != len(b) {
		return true
	}
	for i := range a {
		if a[i].Class != b[i].Class || a[i].Level != b[i].Level || a[i].Action != b[i].Action {
			return true
		}
	}
	return false
}

// evaluateLocked judges every class and publishes the routing verdict for the
// request path.
func (r *Runtime) evaluateLocked(now time.Time) {
	if r.cur == nil {
		r.states = nil
		r.degraded.Store(nil)
		r.authzExpired.Store(nil)
		return
	}
	set := r.cur.policy.set
	r.states = set.EvaluateAll(r.lastConfirmed, nil, now, r.seed)
	var reason *string
	for _, s := range r.states {
		if routing(s.Class) && s.Level == staleness.Expired && s.Action != staleness.ServeStale {
			why := DegradedReason(s, set[s.Class].EffectiveExpireAfter(r.seed))
			reason = &why
			break
		}
	}
	if old := r.degraded.Load(); (old == nil) != (reason == nil) {
		if reason != nil {
			r.log.Warn("routing fails closed", "reason", *reason)
		} else {
			r.log.Info("routing restored")
		}
	}
	r.degraded.Store(reason)
	r.evaluateAuthzLocked(set)
	if m := r.cfg.Metrics; m != nil {
		for _, s := range r.states {
			m.age.WithLabelValues(string(s.Class)).Set(s.Age.Seconds())
			m.level.WithLabelValues(string(s.Class)).Set(float64(s.Level))
		}
	}
}

// DegradedReason is the x-weft-degraded header value for an expired class:
// "routes expired (age 2.1s > expireAfter 2s)".
func DegradedReason(s staleness.State, expireAfter time.Duration) string {
	if expireAfter > 0 && s.Age >= expireAfter {
		return fmt.Sprintf("%s expired (age %v > expireAfter %v)", s.Class, s.Age.Round(time.Millisecond), expireAfter)
	}
	return fmt.Sprintf("%s expired (%s)", s.Class, s.Reason)
}

// publishLocked stores a new Dump.
func (r *Runtime) publishLocked() {
	d := &Dump{
		NodeID:        r.cfg.NodeID,
		Pending:       r.pending,
		LastConfirmed: r.lastConfirmed,
		LastKnownGood: r.lkgInfo,
		Counters:      r.counters,
		Staleness:     []ClassState{},
	}
	r.storeConfirmed()
	if c := r.cur; c != nil {
		d.pol = c.policy // Dump judges staleness at read time with it
		a := &ActiveInfo{Source: c.source, ActivatedAt: c.at, Digest: c.digest, Versions: c.versions, Resources: map[string]int{}, Current: c.current}
		for _, res := range c.resources {
			a.Resources[res.TypeURL]++
		}
		if c.m != nil {
			a.Revision = c.m.Revision
			a.Manifest = &ManifestInfo{Revision: c.m.Revision, IssuedAt: c.m.IssuedAt, ValidUntil: c.m.ValidUntil,
				KeyID: c.m.KeyID, Resources: c.m.Count, Scope: c.m.Scope, Digest: hex.EncodeToString(c.m.Digest[:]),
				Current: c.m.Current, StreamRevision: c.m.StreamRevision, TrustPath: len(c.path)}
			if p := c.m.Publisher; p != nil {
				a.Manifest.PublisherSerial, a.Manifest.PublisherNotAfter = p.SerialNumber.Text(16), p.NotAfter
				if len(p.URIs) == 1 {
					a.Manifest.Publisher = p.URIs[0].String()
				}
			}
		}
		d.Active = a
	}
	switch {
	case r.cur == nil:
		d.Reason = r.notReady
	case r.degraded.Load() != nil:
		d.Reason = "routing fails closed: " + *r.degraded.Load()
		d.failClosed = true
	case r.cur.source == SourceXDS && !r.cur.current:
		d.Reason = notCurrentReason(r.cur)
	default:
		d.Ready = true
	}
	if m := r.cfg.Metrics; m != nil {
		if d.Ready {
			m.ready.Set(1)
		} else {
			m.ready.Set(0)
		}
		if d.Active != nil && d.Active.Manifest != nil {
			m.validUntil.Set(float64(d.Active.Manifest.ValidUntil.Unix()))
		}
	}
	r.dump.Store(d)
}

// Metrics are the runtime's Prometheus series.
type Metrics struct {
	activations *prometheus.CounterVec
	// activationDuration: see Runtime.LastActivation.
	activationDuration prometheus.Histogram
	rejected           prometheus.Counter
	age                *prometheus.GaugeVec
	level              *prometheus.GaugeVec
	ready              prometheus.Gauge
	validUntil         prometheus.Gauge
}

// NewMetrics registers the runtime's series on reg.
func NewMetrics(reg prometheus.Registerer) (*Metrics, error) {
	m := &Metrics{
		activations: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "weft_sidecar_activations_total", Help: "Configurations activated, by source (xds, last-known-good)."}, []string{"source"}),
		activationDuration: prometheus.NewHistogram(prometheus.HistogramOpts{Name: "weft_sidecar_activation_duration_seconds",
			Help: "Time an activation from xDS took: hashing, manifest check, compile and swap (persisting excluded).",
			// 1 ms to 5 s, finest around the 50 ms goal for 1,000 Services × 10 rules.
			Buckets: []float64{.001, .0025, .005, .01, .025, .05, .075, .1, .25, .5, 1, 2.5, 5}}),
		rejected:   prometheus.NewCounter(prometheus.CounterOpts{Name: "weft_sidecar_activation_rejected_total", Help: "Candidates that failed to compile and were NACKed."}),
		age:        prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "weft_sidecar_staleness_age_seconds", Help: "Age of each class of state since pilot last confirmed it."}, []string{"class"}),
		level:      prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "weft_sidecar_staleness_level", Help: "Staleness level per class: 0 fresh, 1 warn, 2 restricted, 3 expired."}, []string{"class"}),
		ready:      prometheus.NewGauge(prometheus.GaugeOpts{Name: "weft_sidecar_ready", Help: "1 when a valid configuration is active and routing is not failed closed."}),
		validUntil: prometheus.NewGauge(prometheus.GaugeOpts{Name: "weft_sidecar_manifest_valid_until_seconds", Help: "Unix time the active manifest's validity ends."}),
	}
	for _, c := range []prometheus.Collector{m.activations, m.activationDuration, m.rejected, m.age, m.level, m.ready, m.validUntil} {
		if err := reg.Register(c); err != nil {
			return nil, fmt.Errorf("register runtime metrics: %w", err)
		}
	}
	m.activations.WithLabelValues(SourceXDS)
	m.activations.WithLabelValues(SourceLKG)
	return m, nil
}

// evaluateAuthzLocked publishes authorization's verdict for the request path:
// past its expiry, unless it serves stale, every inbound request is denied
// (AuthzExpired). drop fails closed too: dropping authorization state must
// never leave a workload open.
func (r *Runtime) evaluateAuthzLocked(set staleness.Set) {
	var reason *string
	for _, s := range r.states {
		if s.Class == staleness.Authorization && s.Level == staleness.Expired && s.Action != staleness.ServeStale {
			why := DegradedReason(s, set[s.Class].EffectiveExpireAfter(r.seed))
			reason = &why
		}
	}
	if old := r.authzExpired.Load(); (old == nil) != (reason == nil) {
		if reason != nil {
			r.log.Warn("authorization fails closed: every inbound request is denied", "reason", *reason)
		} else {
			r.log.Info("authorization restored")
		}
	}
	r.authzExpired.Store(reason)
}

// AuthzExpired reports whether authorization state is past its staleness
// expiry and why (one atomic load): the request path's
// httpproxy.Config.AuthzExpired and tcpproxy.Config.AuthzExpired.
func (r *Runtime) AuthzExpired() (string, bool) {
	if p := r.authzExpired.Load(); p != nil {
		return *p, true
	}
	return "", false
}
