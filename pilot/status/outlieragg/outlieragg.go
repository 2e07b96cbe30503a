// Package outlieragg aggregates the outlier ejection reports of many proxies per
// endpoint: how many proxies eject it now, by which detectors, since when. It is
// a pure core (DESIGN.md convention 6): it reads no clock (callers pass now),
// starts no goroutine and takes no lock (its owner serializes calls).
//
// A proxy's report replaces its previous one whole. Its entries vanish when the
// stream that sent it ends (Drop) or when it is not refreshed within TTL. Every
// bound is explicit: reports per node per window, and the total entries held.
package outlieragg

import (
	"errors"
	"fmt"
	"sort"
	"time"

	"github.com/weft-mesh/weft/internal/outlierreport"
)

// Limits bound the aggregate. DefaultLimits are pilot's.
type Limits struct {
	TTL                 time.Duration // a report not refreshed within it is gone
	RateWindow          time.Duration // reports per node are counted per window
	MaxReportsPerWindow int           // a node's report past it in one window is refused
	MaxEntries          int           // entries held over all nodes; a report that would pass it is refused
	MaxNodesListed      int           // proxies named per endpoint in a view (all are counted)
}

// DefaultMaxEntries is the default bound of entries held over all nodes:
// 10,000 proxies with 10 ejections each.
const DefaultMaxEntries = 100_000

// DefaultMaxNodesListed is how many ejecting proxies an endpoint's view names.
const DefaultMaxNodesListed = 10

// DefaultLimits follow the sidecar's rate (internal/outlierreport).
func DefaultLimits() Limits {
	return Limits{TTL: outlierreport.TTL, RateWindow: outlierreport.RateWindow, MaxReportsPerWindow: outlierreport.MaxReportsPerWindow,
		MaxEntries: DefaultMaxEntries, MaxNodesListed: DefaultMaxNodesListed}
}

// Check says which limit is not positive.
func (l Limits) Check() error {
	var errs []error
	if l.TTL <= 0 {
		errs = append(errs, fmt.Errorf("outlier reports: TTL must be > 0, got %v", l.TTL))
	}
	if l.RateWindow <= 0 {
		errs = append(errs, fmt.Errorf("outlier reports: RateWindow must be > 0, got %v", l.RateWindow))
	}
	if l.MaxReportsPerWindow <= 0 {
		errs = append(errs, fmt.Errorf("outlier reports: MaxReportsPerWindow must be > 0, got %d", l.MaxReportsPerWindow))
	}
	if l.MaxEntries <= 0 {
		errs = append(errs, fmt.Errorf("outlier reports: MaxEntries must be > 0, got %d", l.MaxEntries))
	}
	if l.MaxNodesListed <= 0 {
		errs = append(errs, fmt.Errorf("outlier reports: MaxNodesListed must be > 0, got %d", l.MaxNodesListed))
	}
	return errors.Join(errs...)
}

// Refusals. Put wraps one of them with the node and the numbers.
var (
	ErrRateLimited = errors.New("outlier report rate exceeded")
	ErrFull        = errors.New("pilot's outlier entries are full")
)

// Aggregate is every live report. Not safe for concurrent use.
type Aggregate struct {
	lim     Limits
	nodes   map[string]*nodeState
	entries int // sum of len(entries) over nodes
}

type nodeState struct {
	owner       uint64    // the stream that sent the report (0: none, rate state only)
	at          time.Time // when the report arrived
	total       uint32
	entries     []entry
	windowStart time.Time
	inWindow    int
}

type entry struct {
	service, endpoint string
	detector          outlierreport.Detector
	since             time.Time // pilot's clock: arrival − age
	times             uint32
}

// New returns an empty aggregate; lim must pass Check.
func New(lim Limits) (*Aggregate, error) {
	if err := lim.Check(); err != nil {
		return nil, err
	}
	return &Aggregate{lim: lim, nodes: map[string]*nodeState{}}, nil
}

// Put replaces node's report with r, received at now on stream owner (non-zero).
// It refuses a report past the node's rate (ErrRateLimited) or one that would
// take the total past MaxEntries (ErrFull); a refused report changes no entry
// (one refused as full still counts toward the node's rate). r must be valid.
func (a *Aggregate) Put(node string, owner uint64, r *outlierreport.Report, now time.Time) error {
	a.Expire(now)
	n := a.nodes[node]
	if n == nil {
		n = &nodeState{windowStart: now}
		a.nodes[node] = n
	}
	if now.Sub(n.windowStart) >= a.lim.RateWindow || now.Before(n.windowStart) {
		n.windowStart, n.inWindow = now, 0
	}
	if n.inWindow >= a.lim.MaxReportsPerWindow {
		return fmt.Errorf("node %s: %w: at most %d reports per %v", node, ErrRateLimited, a.lim.MaxReportsPerWindow, a.lim.RateWindow)
	}
	n.inWindow++
	if total := a.entries - len(n.entries) + len(r.Entries); total > a.lim.MaxEntries {
		return fmt.Errorf("node %s: %w: its %d entries would make %d, at most %d", node, ErrFull, len(r.Entries), total, a.lim.MaxEntries)
	}
	old := n.entries
	if n.owner != owner {
		old = nil // another stream: nothing carries over
	}
	es := make([]entry, len(r.Entries))
	j := 0
	for i, e := range r.Entries {
		es[i] = entry{service: e.Service, endpoint: e.Endpoint, detector: e.Detector, since: now.Add(-e.Age), times: e.Times}
		// Both lists are sorted: a host still ejected in the same episode keeps
		// its first since, so refreshes do not make it jitter by the RTT.
		for j < len(old) && (old[j].service < e.Service || old[j].service == e.Service && old[j].endpoint < e.Endpoint) {
			j++
		}
		if j < len(old) && old[j].service == e.Service && old[j].endpoint == e.Endpoint &&
			old[j].detector == e.Detector && old[j].times == e.Times && old[j].since.Before(es[i].since) {
			es[i].since = old[j].since
		}
	}
	a.entries += len(es) - len(n.entries)
	n.owner, n.at, n.total, n.entries = owner, now, r.Total, es
	return nil
}

// Drop removes node's report if stream owner sent it (a newer stream's report
// stays). The node's rate state stays until its window ends.
func (a *Aggregate) Drop(node string, owner uint64) {
	n := a.nodes[node]
	if n == nil || n.owner != owner {
		return
	}
	a.entries -= len(n.entries)
	n.owner, n.entries, n.total = 0, nil, 0
}

// Expire drops reports older than TTL and rate state whose window ended.
func (a *Aggregate) Expire(now time.Time) {
	for id, n := range a.nodes {
		if n.owner != 0 && now.Sub(n.at) >= a.lim.TTL {
			a.entries -= len(n.entries)
			n.owner, n.entries, n.total = 0, nil, 0
		}
		if n.owner == 0 && now.Sub(n.windowStart) >= a.lim.RateWindow {
			delete(a.nodes, id)
		}
	}
}

// Entries is the number of entries held.
func (a *Aggregate) Entries() int { return a.entries }

// Reporters lists the nodes with a live report and the stream that sent it.
func (a *Aggregate) Reporters() map[string]uint64 {
	out := make(map[string]uint64, len(a.nodes))
	for id, n := range a.nodes {
		if n.owner != 0 {
			out[id] = n.owner
		}
	}
	return out
}

// Endpoint is one ejected endpoint over every live report.
type Endpoint struct {
	Service  string `json:"service"`
	Endpoint string `json:"endpoint"`
	// EjectedBy proxies eject it now, of Clients: the reporting proxies that
	// hold a cluster of Service (at least EjectedBy).
	EjectedBy int `json:"ejectedBy"`
	Clients   int `json:"clients"`
	// Detectors counts the ejecting proxies by the detector that ejected it.
	Detectors map[string]int `json:"detectors"`
	// Since is the earliest ejection start among them, on pilot's clock (the
	// arrival of the report minus the age it gave: sidecar clocks do not matter).
	Since time.Time `json:"since"`
	// MaxTimes is the highest ejection count a proxy gave (ejection time grows with it).
	MaxTimes uint32 `json:"maxTimes"`
	// Nodes names up to MaxNodesListed ejecting proxies, sorted.
	Nodes        []string `json:"nodes"`
	NodesOmitted int      `json:"nodesOmitted,omitempty"`
}

// View is the whole aggregate.
type View struct {
	Reporters  int `json:"reporters"` // proxies with a live report
	Entries    int `json:"entries"`   // entries held, at most MaxEntries
	MaxEntries int `json:"maxEntries"`
	// Partial names the proxies whose report left ejections out (more than
	// outlierreport.MaxEntries, or past its byte bound), with how many they hold.
	Partial   map[string]uint32 `json:"partial,omitempty"`
	Endpoints []Endpoint        `json:"endpoints"`
}

// View aggregates per (service, endpoint) at now. holds(node, service) says
// whether node holds a cluster of service (from what pilot sent it); a proxy
// that ejects an endpoint counts as holding its service. Sorted by EjectedBy,
// most first, then service and endpoint.
func (a *Aggregate) View(now time.Time, holds func(node, service string) bool) View {
	a.Expire(now)
	v := View{Entries: a.entries, MaxEntries: a.lim.MaxEntries, Endpoints: []Endpoint{}}
	type key struct{ service, endpoint string }
	byKey := map[key]*Endpoint{}
	ejecting := map[key]map[string]bool{}
	var reporters []string
	for id, n := range a.nodes {
		if n.owner == 0 {
			continue
		}
		reporters = append(reporters, id)
		if int(n.total) > len(n.entries) {
			if v.Partial == nil {
				v.Partial = map[string]uint32{}
			}
			v.Partial[id] = n.total
		}
		for _, e := range n.entries {
			k := key{e.service, e.endpoint}
			ep := byKey[k]
			if ep == nil {
				ep = &Endpoint{Service: e.service, Endpoint: e.endpoint, Detectors: map[string]int{}, Since: e.since}
				byKey[k] = ep
				ejecting[k] = map[string]bool{}
			}
			ep.EjectedBy++
			ep.Detectors[e.detector.String()]++
			if e.since.Before(ep.Since) {
				ep.Since = e.since
			}
			ep.MaxTimes = max(ep.MaxTimes, e.times)
			ejecting[k][id] = true
			ep.Nodes = append(ep.Nodes, id)
		}
	}
	v.Reporters = len(reporters)
	for k, ep := range byKey {
		for _, id := range reporters {
			if ejecting[k][id] || holds(id, k.service) {
				ep.Clients++
			}
		}
		sort.Strings(ep.Nodes)
		if len(ep.Nodes) > a.lim.MaxNodesListed {
			ep.NodesOmitted = len(ep.Nodes) - a.lim.MaxNodesListed
			ep.Nodes = ep.Nodes[:a.lim.MaxNodesListed]
		}
		v.Endpoints = append(v.Endpoints, *ep)
	}
	sort.Slice(v.Endpoints, func(i, j int) bool {
		a, b := v.Endpoints[i], v.Endpoints[j]
		if a.EjectedBy != b.EjectedBy {
			return a.EjectedBy > b.EjectedBy
		}
		if a.Service != b.Service {
			return a.Service < b.Service
		}
		return a.Endpoint < b.Endpoint
	})
	return v
}
