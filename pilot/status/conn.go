package status

import (
	"sort"
	"sync"
	"time"

	"github.com/weft-mesh/weft/bootstrap/node"
	"github.com/weft-mesh/weft/pilot/xds/snapshot"
)

// Conn is the status of one ADS stream. The stream's owner goroutine is its only
// writer; readers take copies through Status and ConfigDump.
type Conn struct {
	t           *Tracker
	id          string
	node        *node.Node
	peer        string // principal of the stream: SPIFFE ID, or transport address when unauthenticated ("" unknown)
	serial      uint64 // unique per Tracker: which stream sent an outlier report
	connectedAt time.Time

	mu           sync.Mutex // guards the fields below
	lastSeen     time.Time
	disconnected time.Time           // zero while connected
	types        map[string]*typeRec // type URL -> record
	effective    int64
	genErr       string // why pilot refused to send the snapshot generated for this proxy ("" = none)
	genErrRev    int64  // the revision that snapshot was generated at
	streamRev    int64  // store revision when the stream opened (as the source reported it)
	notCurrent   bool   // the stream was sent a snapshot older than streamRev after its wait timed out
}

type typeRec struct {
	versionSent     string
	nonce           string
	revisionSent    int64
	versionAcked    string
	revisionAcked   int64
	versionRejected string
	nonceRejected   string
	rejectErr       string
	pendingSince    time.Time    // zero when nothing is pending
	m               *typeMetrics // the type's push counters, resolved at its first push
	sent            *snapshot.Snapshot
	only            map[string]struct{} // names the proxy holds from sent; nil = all of that type
	// held: nothing was sent on this stream because the proxy already holds the
	// content (a delta reconnect whose initial_resource_versions match, or a SotW
	// request at the current version). It is synced, not NOT_SENT.
	held bool
}

func (r *typeRec) status() Status {
	switch {
	case r.nonce == "" && !r.held:
		return NotSent
	case r.nonce == "":
		return Synced
	case !r.pendingSince.IsZero():
		return PendingAck
	case r.versionRejected != "" && r.nonceRejected == r.nonce:
		return Nacked
	}
	return Synced
}

// Sent describes one response sent on the stream.
type Sent struct {
	Type     string
	Version  string // version the proxy will hold once it accepts this response
	Nonce    string
	Revision int64 // store revision of the snapshot it came from
	Bytes    int
	Snapshot *snapshot.Snapshot // what the proxy holds from after this response
	// Only lists the names it holds from Snapshot; nil = every resource of Type.
	// The map is kept, not copied: the caller must never modify it afterwards.
	Only map[string]struct{}
}

func (c *Conn) rec(typ string) *typeRec {
	r, ok := c.types[typ]
	if !ok {
		r = &typeRec{}
		c.types[typ] = r
	}
	return r
}

// Seen records a request from the proxy.
func (c *Conn) Seen(now time.Time) {
	c.mu.Lock()
	c.lastSeen = now
	c.mu.Unlock()
}

// Subscribed records that the proxy asked for a type (shown as NOT_SENT until a
// response goes out).
func (c *Conn) Subscribed(typ string, now time.Time) {
	c.mu.Lock()
	c.rec(typ)
	c.lastSeen = now
	c.mu.Unlock()
}

// Sent records a response.
func (c *Conn) Sent(s Sent, now time.Time) { c.Pushed(s.Revision, s.Snapshot, nil, []Sent{s}, now) }

// Unchanged records that revision rev needed no response for typ: what the proxy
// holds (or was last sent) is already rev's content.
func (c *Conn) Unchanged(typ string, rev int64, snap *snapshot.Snapshot, only map[string]struct{}, now time.Time) {
	c.Pushed(rev, snap, []Held{{Type: typ, Only: only}}, nil, now)
}

// Held is a type one push left unchanged: what the proxy holds (or was last
// sent) of it is already the push's content. Only is as in Sent.
type Held struct {
	Type string
	Only map[string]struct{}
}

// Pushed records one push of revision rev's snapshot snap at once: the types
// it left unchanged and the responses it sends (recorded before they are
// sent: once the proxy can hold a response, the status must already say it is
// pending). It takes the connection's lock once, and the effective revision
// is recomputed once, for the whole push: a fleet-wide change costs every
// stream one update, not one per type.
func (c *Conn) Pushed(rev int64, snap *snapshot.Snapshot, held []Held, sent []Sent, now time.Time) {
	c.update(now, func() {
		for _, h := range held {
			r := c.rec(h.Type)
			r.revisionSent = rev
			r.sent, r.only = snap, h.Only
			if r.nonce == "" {
				r.held = true
				r.versionAcked = snap.Version(h.Type)
			}
			if st := r.status(); st == Synced {
				r.revisionAcked = rev
			}
		}
		for _, s := range sent {
			r := c.rec(s.Type)
			r.versionSent, r.nonce, r.revisionSent = s.Version, s.Nonce, s.Revision
			r.sent, r.only = s.Snapshot, s.Only
			if r.pendingSince.IsZero() {
				r.pendingSince = now
			}
			if r.m == nil {
				r.m = c.t.m.forType(s.Type)
			}
			r.m.pushes.Inc()
			r.m.pushBytes.Add(float64(s.Bytes))
		}
	})
}

// Acked records an ACK of nonce. An ACK of an older nonce changes nothing: only
// the latest response decides the type's state.
func (c *Conn) Acked(typ, nonce string, now time.Time) {
	c.update(now, func() {
		r := c.rec(typ)
		if nonce != r.nonce {
			return
		}
		r.versionAcked, r.revisionAcked = r.versionSent, r.revisionSent
		r.versionRejected, r.nonceRejected, r.rejectErr = "", "", ""
		r.pendingSince = time.Time{}
	})
}

// Nacked records a NACK of nonce with the client's error text. The proxy stays at
// its last acknowledged version and revision.
func (c *Conn) Nacked(typ, nonce, detail string, now time.Time) {
	c.t.m.nacks.WithLabelValues(TypeName(typ)).Inc() // rare: not curried, so the series exists only once a NACK came
	c.update(now, func() {
		r := c.rec(typ)
		if nonce != r.nonce {
			return
		}
		r.versionRejected, r.nonceRejected, r.rejectErr = r.versionSent, nonce, detail
		r.pendingSince = time.Time{}
	})
}

// update runs f under the lock, recomputes the effective revision and reports an
// advance to the tracker after releasing the lock.
func (c *Conn) update(now time.Time, f func()) {
	c.mu.Lock()
	c.lastSeen = now
	f()
	old := c.effective
	c.effective = c.effectiveLocked()
	cur := c.effective
	c.mu.Unlock()
	if cur > old {
		c.t.advance(c, old, cur, now)
	}
}

// effectiveLocked is the newest revision whose content the proxy has acknowledged
// for every type it subscribed to.
func (c *Conn) effectiveLocked() int64 {
	if len(c.types) == 0 {
		return 0
	}
	var min int64 = -1
	for _, r := range c.types {
		if min < 0 || r.revisionAcked < min {
			min = r.revisionAcked
		}
	}
	return min
}

// Disconnect marks the connection DISCONNECTED; it stays listed for the
// retention unless a newer connection of the same node replaced it.
func (c *Conn) Disconnect(now time.Time) {
	c.mu.Lock()
	c.disconnected = now
	c.mu.Unlock()
	c.t.m.connected.Dec()
	t := c.t
	t.mu.Lock()
	if t.proxies[c.id] == c {
		t.gone = append(t.gone, goneEntry{c: c, at: now})
	}
	t.pruneLocked(now)
	t.mu.Unlock()
	t.dropOutliers(c)
}

// rollup is what per-revision counts need: whether the stream ended, its
// effective revision, and the newest revision whose content a NACKED type
// rejected (-1 if none). A type's sent revision advances while its content is
// unchanged, so a rejection counts for every revision that carries it, and not
// for a newer revision the stream has not evaluated yet.
func (c *Conn) rollup() (disconnected bool, effective, rejected int64) {
	c.mu.Lock()
	defer c.mu.Unlock()
	rejected = -1
	for _, r := range c.types {
		if r.status() == Nacked && r.revisionSent > rejected {
			rejected = r.revisionSent
		}
	}
	if c.genErr != "" && c.genErrRev > rejected {
		rejected = c.genErrRev
	}
	return !c.disconnected.IsZero(), c.effective, rejected
}

// TypeStatus is one xDS type of one proxy.
type TypeStatus struct {
	Type            string     `json:"type"`
	TypeURL         string     `json:"typeUrl"`
	Status          Status     `json:"status"`
	VersionSent     string     `json:"versionSent,omitempty"`
	Nonce           string     `json:"nonce,omitempty"`
	RevisionSent    int64      `json:"revisionSent"`
	VersionAcked    string     `json:"versionAcked,omitempty"`
	RevisionAcked   int64      `json:"revisionAcked"`
	VersionRejected string     `json:"versionRejected,omitempty"`
	NonceRejected   string     `json:"nonceRejected,omitempty"`
	Error           string     `json:"error,omitempty"`
	PendingSince    *time.Time `json:"pendingSince,omitempty"`
}

// ProxyStatus is one proxy.
type ProxyStatus struct {
	Node              string       `json:"node"`
	Namespace         string       `json:"namespace,omitempty"`
	Status            Status       `json:"status"`
	ConnectedSince    time.Time    `json:"connectedSince"`
	LastSeen          time.Time    `json:"lastSeen"`
	DisconnectedAt    *time.Time   `json:"disconnectedAt,omitempty"`
	EffectiveRevision int64        `json:"effectiveRevision"`
	Types             []TypeStatus `json:"types"`
	// GenError is why pilot refused to send the snapshot it generated for this
	// proxy at GenErrorRevision (it failed pilot's copy of the sidecar's own
	// validation); the proxy keeps what it has.
	GenError         string `json:"genError,omitempty"`
	GenErrorRevision int64  `json:"genErrorRevision,omitempty"`
	// StreamRevision is the store revision when the stream opened. NotCurrent:
	// pilot's compile of it did not come within its wait (--xds-current-wait),
	// so the stream was sent the older snapshot pilot had, marked not current;
	// a Weft sidecar is not ready on it. Cleared when a current one is sent.
	StreamRevision int64 `json:"streamRevision,omitempty"`
	NotCurrent     bool  `json:"notCurrent,omitempty"`
	// Replica is the pilot replica the status came from, in a status API
	// answer across replicas (FanOutHandler).
	Replica string `json:"replica,omitempty"`
}

// Status returns a copy of the connection's status.
func (c *Conn) Status() ProxyStatus {
	c.mu.Lock()
	defer c.mu.Unlock()
	ps := ProxyStatus{Node: c.id, Namespace: c.node.Namespace, ConnectedSince: c.connectedAt, LastSeen: c.lastSeen, EffectiveRevision: c.effective,
		GenError: c.genErr, GenErrorRevision: c.genErrRev, StreamRevision: c.streamRev, NotCurrent: c.notCurrent}
	for _, typ := range orderedTypes(c.types) {
		r := c.types[typ]
		ts := TypeStatus{Type: TypeName(typ), TypeURL: typ, Status: r.status(), VersionSent: r.versionSent, Nonce: r.nonce,
			RevisionSent: r.revisionSent, VersionAcked: r.versionAcked, RevisionAcked: r.revisionAcked,
			VersionRejected: r.versionRejected, NonceRejected: r.nonceRejected, Error: r.rejectErr}
		if !r.pendingSince.IsZero() {
			p := r.pendingSince
			ts.PendingSince = &p
		}
		ps.Types = append(ps.Types, ts)
	}
	ps.Status = aggregate(ps.Types)
	if !c.disconnected.IsZero() {
		d := c.disconnected
		ps.DisconnectedAt = &d
		ps.Status = Disconnected
	}
	return ps
}

// aggregate: any NACKED type makes the proxy NACKED, then any PENDING_ACK; a
// proxy that was sent nothing at all is NOT_SENT.
func aggregate(ts []TypeStatus) Status {
	has := map[Status]bool{}
	for _, t := range ts {
		has[t.Status] = true
	}
	switch {
	case has[Nacked]:
		return Nacked
	case has[PendingAck]:
		return PendingAck
	case has[Synced]:
		return Synced
	}
	return NotSent
}

// orderedTypes lists type URLs in push order, unknown ones after, sorted.
func orderedTypes(m map[string]*typeRec) []string {
	out := make([]string, 0, len(m))
	for _, typ := range snapshot.PushOrder {
		if _, ok := m[typ]; ok {
			out = append(out, typ)
		}
	}
	var rest []string
	for typ := range m {
		if TypeName(typ) == "other" {
			rest = append(rest, typ)
		}
	}
	sort.Strings(rest)
	return append(out, rest...)
}

// GenError records that pilot refused to send the snapshot generated for this
// proxy at rev, and why; msg "" clears it (a later generation was sent).
func (c *Conn) GenError(rev int64, msg string) {
	c.mu.Lock()
	c.genErr, c.genErrRev = msg, rev
	if msg == "" {
		c.genErrRev = 0
	}
	c.mu.Unlock()
}

// Currency records what the source offers the stream: the store revision when
// it opened, and whether the snapshot sent is current for it.
func (c *Conn) Currency(streamRev int64, current bool) {
	c.mu.Lock()
	c.streamRev, c.notCurrent = streamRev, !current
	c.mu.Unlock()
}
