// Package status tracks what every connected proxy was sent, acknowledged or
// rejected, per xDS type, and derives from it the store revision each proxy is
// effective at and how far each revision has rolled out. The ADS stream that owns
// a proxy reports into a Conn; readers get copies (ProxyStatus, RevisionStatus).
package status

import (
	"errors"
	"fmt"
	"sort"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/weft-mesh/weft/bootstrap/node"
	"github.com/weft-mesh/weft/pilot/status/outlieragg"
	"github.com/weft-mesh/weft/pilot/xds/snapshot"
)

// Status names a proxy's or a type's state so it cannot be misread.
type Status string

const (
	Synced       Status = "SYNCED"       // latest version sent was acknowledged
	PendingAck   Status = "PENDING_ACK"  // a version was sent and not answered yet
	Nacked       Status = "NACKED"       // the latest version sent was rejected
	NotSent      Status = "NOT_SENT"     // nothing sent yet
	Disconnected Status = "DISCONNECTED" // the stream ended; kept for Config.Retention
)

// ErrNotFound is returned for an unknown proxy or revision.
var ErrNotFound = errors.New("not found")

// Config configures a Tracker. Every limit is explicit.
type Config struct {
	Logger          hclog.Logger
	Registerer      prometheus.Registerer // metrics are registered here
	Retention       time.Duration         // how long a DISCONNECTED proxy stays listed
	MaxDisconnected int                   // at most this many DISCONNECTED proxies are kept
	MaxRevisions    int                   // store revisions whose write time is remembered
	Clock           func() time.Time      // for the HTTP handler; nil = time.Now
	// Outliers bounds the outlier report aggregate; zero means
	// outlieragg.DefaultLimits.
	Outliers outlieragg.Limits
}

func (c Config) check() error {
	switch {
	case c.Logger == nil:
		return errors.New("status: Config.Logger is required")
	case c.Registerer == nil:
		return errors.New("status: Config.Registerer is required")
	case c.Retention <= 0:
		return fmt.Errorf("status: Config.Retention must be > 0, got %v", c.Retention)
	case c.MaxDisconnected <= 0:
		return fmt.Errorf("status: Config.MaxDisconnected must be > 0, got %d", c.MaxDisconnected)
	case c.MaxRevisions <= 0:
		return fmt.Errorf("status: Config.MaxRevisions must be > 0, got %d", c.MaxRevisions)
	}
	if c.Outliers != (outlieragg.Limits{}) {
		if err := c.Outliers.Check(); err != nil {
			return fmt.Errorf("status: Config.Outliers: %w", err)
		}
	}
	return nil
}

// Tracker is the status of every proxy. Safe for concurrent use.
type Tracker struct {
	cfg Config
	log hclog.Logger
	m   *metrics

	mu      sync.Mutex       // guards the fields below; never held while taking a Conn's mu
	proxies map[string]*Conn // node id -> latest connection of that node
	gone    []goneEntry      // disconnected conns, oldest first (may hold replaced entries)
	serial  uint64           // last Conn.serial handed out
	// revisions is sorted by revision, at most cfg.MaxRevisions, and never
	// modified once stored (RevisionWritten stores a new slice, under mu):
	// every stream's ACK reads it (advance) without a lock.
	revisions atomic.Pointer[[]*revisionRec]

	// omu guards outliers. Taken before t.mu or a Conn's mu, never while
	// holding either.
	omu      sync.Mutex
	outliers *outlieragg.Aggregate
}

type goneEntry struct {
	c  *Conn
	at time.Time
}

type revisionRec struct {
	rev       int64
	writtenAt time.Time
	// lastAck is the last time (Unix nanoseconds; 0 none) a proxy connected
	// before writtenAt became effective at >= rev.
	lastAck atomic.Int64
}

// revs is the current revision records (sorted, read-only).
func (t *Tracker) revs() []*revisionRec {
	if p := t.revisions.Load(); p != nil {
		return *p
	}
	return nil
}

// New checks cfg and registers the metrics.
func New(cfg Config) (*Tracker, error) {
	if err := cfg.check(); err != nil {
		return nil, err
	}
	if cfg.Clock == nil {
		cfg.Clock = time.Now
	}
	if cfg.Outliers == (outlieragg.Limits{}) {
		cfg.Outliers = outlieragg.DefaultLimits()
	}
	agg, err := outlieragg.New(cfg.Outliers)
	if err != nil {
		return nil, fmt.Errorf("status: %w", err)
	}
	m, err := newMetrics(cfg.Registerer)
	if err != nil {
		return nil, err
	}
	return &Tracker{cfg: cfg, log: cfg.Logger, m: m, proxies: map[string]*Conn{}, outliers: agg}, nil
}

// RevisionWritten records when store revision rev was written (the store event
// time), so convergence can be measured from it.
func (t *Tracker) RevisionWritten(rev int64, at time.Time) {
	t.mu.Lock()
	defer t.mu.Unlock()
	cur := t.revs()
	i := sort.Search(len(cur), func(i int) bool { return cur[i].rev >= rev })
	if i < len(cur) && cur[i].rev == rev {
		return
	}
	next := make([]*revisionRec, 0, len(cur)+1)
	next = append(append(append(next, cur[:i]...), &revisionRec{rev: rev, writtenAt: at}), cur[i:]...)
	if n := len(next) - t.cfg.MaxRevisions; n > 0 {
		next = next[n:]
	}
	t.revisions.Store(&next)
}

// Connect starts tracking a new stream of n. A newer connection of the same node
// replaces the older one's record.
func (t *Tracker) Connect(n *node.Node, now time.Time) *Conn { return t.ConnectFrom(n, "", now) }

// ConnectFrom is Connect for a stream from peer, its principal: the SPIFFE ID
// of an authenticated stream, else its transport address (as grpc-go's
// peer.Peer gives it). Outlier reports for n are taken only from the same
// principal ("" takes none).
func (t *Tracker) ConnectFrom(n *node.Node, peer string, now time.Time) *Conn {
	c := &Conn{t: t, id: n.ID, node: n, peer: peer, connectedAt: now, lastSeen: now, types: map[string]*typeRec{}}
	t.mu.Lock()
	t.serial++
	c.serial = t.serial
	t.proxies[n.ID] = c
	t.pruneLocked(now)
	t.mu.Unlock()
	t.m.connected.Inc()
	return c
}

func (t *Tracker) pruneLocked(now time.Time) {
	drop := 0
	for drop < len(t.gone) {
		g := t.gone[drop]
		if now.Sub(g.at) < t.cfg.Retention && len(t.gone)-drop <= t.cfg.MaxDisconnected {
			break
		}
		if t.proxies[g.c.id] == g.c {
			delete(t.proxies, g.c.id)
		}
		drop++
	}
	if drop > 0 {
		t.gone = append(t.gone[:0:0], t.gone[drop:]...)
	}
}

// advance records that a connection moved from effective revision old to cur.
// Every stream's ACK of a change comes here: it takes no lock, and looks only
// at the revisions in (old, cur].
func (t *Tracker) advance(c *Conn, old, cur int64, now time.Time) {
	revs := t.revs()
	var observe *revisionRec
	at := now.UnixNano()
	for i := sort.Search(len(revs), func(i int) bool { return revs[i].rev > old }); i < len(revs) && revs[i].rev <= cur; i++ {
		r := revs[i]
		if !c.connectedAt.Before(r.writtenAt) {
			continue
		}
		for {
			last := r.lastAck.Load()
			if at <= last || r.lastAck.CompareAndSwap(last, at) {
				break
			}
		}
		observe = r
	}
	if observe != nil {
		t.m.convergence.Observe(now.Sub(observe.writtenAt).Seconds())
	}
}

func (t *Tracker) conns() []*Conn {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.pruneLocked(t.cfg.Clock())
	out := make([]*Conn, 0, len(t.proxies))
	for _, c := range t.proxies {
		out = append(out, c)
	}
	return out
}

// Proxies returns every tracked proxy (connected, or DISCONNECTED within the
// retention), sorted by node id.
func (t *Tracker) Proxies() []ProxyStatus {
	cs := t.conns()
	out := make([]ProxyStatus, 0, len(cs))
	for _, c := range cs {
		out = append(out, c.Status())
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Node < out[j].Node })
	return out
}

// Proxy returns one proxy's status, or ErrNotFound.
func (t *Tracker) Proxy(id string) (ProxyStatus, error) {
	c, err := t.conn(id)
	if err != nil {
		return ProxyStatus{}, err
	}
	return c.Status(), nil
}

func (t *Tracker) conn(id string) (*Conn, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.pruneLocked(t.cfg.Clock())
	c, ok := t.proxies[id]
	if !ok {
		return nil, fmt.Errorf("proxy %q: %w", id, ErrNotFound)
	}
	return c, nil
}

// Rejection names a proxy that rejected a version and why.
type Rejection struct {
	Node    string `json:"node"`
	Type    string `json:"type"`
	Version string `json:"version"`
	Nonce   string `json:"nonce"`
	Error   string `json:"error"`
}

// RevisionStatus is how far one store revision has rolled out over the proxies
// connected now. Converged means every connected proxy has it effective.
// Rejected counts proxies that NACKed a version carrying this revision's content
// (a NACK of an older revision leaves a proxy pending for a newer one until its
// stream has evaluated it).
type RevisionStatus struct {
	Revision           int64       `json:"revision"`
	WrittenAt          *time.Time  `json:"writtenAt,omitempty"`
	Connected          int         `json:"connected"`
	Effective          int         `json:"effective"`
	Pending            int         `json:"pending"`
	Rejected           int         `json:"rejected"`
	Converged          bool        `json:"converged"`
	LastAckAt          *time.Time  `json:"lastAckAt,omitempty"`
	ConvergenceSeconds *float64    `json:"convergenceSeconds,omitempty"`
	Rejections         []Rejection `json:"rejections,omitempty"`
}

// LatestRevision is the newest revision recorded with RevisionWritten, or
// ErrNotFound when none was.
func (t *Tracker) LatestRevision() (int64, error) {
	revs := t.revs()
	if len(revs) == 0 {
		return 0, fmt.Errorf("latest revision: %w", ErrNotFound)
	}
	return revs[len(revs)-1].rev, nil
}

// Revision reports the rollout of rev. Revisions older than the retained window
// are still answered but without write time or convergence time.
func (t *Tracker) Revision(rev int64) RevisionStatus {
	rs := RevisionStatus{Revision: rev}
	for _, r := range t.revs() {
		if r.rev == rev {
			w := r.writtenAt
			rs.WrittenAt = &w
			if ns := r.lastAck.Load(); ns != 0 {
				a := time.Unix(0, ns)
				rs.LastAckAt = &a
			}
		}
	}
	for _, c := range t.conns() {
		// rollup is allocation-free: this runs over every proxy on each poll.
		gone, effective, rejected := c.rollup()
		if gone {
			continue
		}
		rs.Connected++
		switch {
		case effective >= rev:
			rs.Effective++
		case rejected >= rev:
			rs.Rejected++
			ps := c.Status()
			for _, ts := range ps.Types {
				if ts.Status == Nacked && ts.RevisionSent >= rev {
					rs.Rejections = append(rs.Rejections, Rejection{Node: ps.Node, Type: ts.Type, Version: ts.VersionRejected, Nonce: ts.NonceRejected, Error: ts.Error})
				}
			}
			if ps.GenError != "" && ps.GenErrorRevision >= rev {
				rs.Rejections = append(rs.Rejections, Rejection{Node: ps.Node, Type: GenerationType, Error: ps.GenError})
			}
		default:
			rs.Pending++
		}
	}
	sort.Slice(rs.Rejections, func(i, j int) bool {
		a, b := rs.Rejections[i], rs.Rejections[j]
		return a.Node < b.Node || a.Node == b.Node && a.Type < b.Type
	})
	rs.Converged = rs.Effective == rs.Connected
	if rs.Converged && rs.WrittenAt != nil && rs.LastAckAt != nil {
		d := rs.LastAckAt.Sub(*rs.WrittenAt).Seconds()
		rs.ConvergenceSeconds = &d
	}
	return rs
}

// GenerationType is the Rejection.Type of a snapshot pilot itself refused to
// send to a proxy (ProxyStatus.GenError).
const GenerationType = "GENERATION"

// GenError records, on the current connection of node id, that pilot refused
// the snapshot generated for it at rev and why (msg), or clears it (msg "").
// An unknown node is ignored: its next connection reports again.
func (t *Tracker) GenError(id string, rev int64, msg string) {
	c, err := t.conn(id)
	if err != nil {
		return
	}
	c.GenError(rev, msg)
}

// Currency records, for proxy id's stream, the store revision it opened at and
// whether the snapshot it was sent is current for it (ProxyStatus.NotCurrent).
func (t *Tracker) Currency(id string, streamRev int64, current bool) {
	c, err := t.conn(id)
	if err != nil {
		return
	}
	c.Currency(streamRev, current)
}

// TypeName is the short name of an xDS type URL used in labels and JSON.
func TypeName(typeURL string) string {
	switch typeURL {
	case snapshot.ClusterType:
		return "CDS"
	case snapshot.EndpointType:
		return "EDS"
	case snapshot.LbEndpointType:
		return "LEDS"
	case snapshot.ListenerType:
		return "LDS"
	case snapshot.RouteType:
		return "RDS"
	case snapshot.SecretType:
		return "SDS"
	case snapshot.StalenessType:
		return "STALENESS"
	case snapshot.ManifestType:
		return "MANIFEST"
	}
	return "other"
}
