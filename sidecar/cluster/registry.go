package cluster

import (
	"github.com/weft-mesh/weft/internal/clustername"
	"net/netip"
	"slices"
	"strings"
	"sync"
	"sync/atomic"

	"github.com/weft-mesh/weft/sidecar/circuitbreak"
	"github.com/weft-mesh/weft/sidecar/outlier"
	"github.com/weft-mesh/weft/sidecar/ratelimit"
)

// Registry holds the state that must outlive configurations: one *Shared per
// service key and, in each, one *Host per endpoint address. The sidecar creates one
// and every compile takes its entries from it, so breaker counts, in-flight counts
// and per-host state carry over a config swap, and subset clusters of one Service
// share them. The request path never touches the Registry: a Cluster holds its
// *Shared and an Endpoint its *Host.
//
// Entries are retired by Retain after a configuration is swapped in (never after a
// refused candidate); a request still running on an older configuration keeps its
// pointers, which stay valid: its releases land in the retired objects.
type Registry struct {
	mu     sync.Mutex         // guards the fields below and every Shared's hosts and marks
	shared map[string]*Shared // by service key
	gen    uint64             // Retain's latest sweep generation

	outliers *outlier.Recorder // every detector's events (see outlier.go)
	totals   outlier.Totals    // every detector's verdicts, over retirements
}

// NewRegistry returns an empty Registry.
func NewRegistry() *Registry {
	rec, _ := outlier.NewRecorder(0, 0) // the defaults are valid
	return &Registry{shared: make(map[string]*Shared), outliers: rec}
}

// Shared is the long-lived state of one service key. Its fields are set once at
// creation; their configuration is applied in place (Breaker.SetLimits).
type Shared struct {
	Key     string
	Breaker *circuitbreak.Breaker
	// Outlier is the service's outlier detection; its members are the hosts the
	// active configuration uses (synced by Retain).
	Outlier *outlier.Detector
	// Limiter is the Service's local rate limit (off until a config sets one);
	// Configure'd in place at activation, its bucket carries over swaps.
	Limiter *ratelimit.Limiter

	reg   *Registry
	hosts map[netip.AddrPort]*Host // guarded by reg.mu
	mark  uint64                   // Retain's sweep generation; guarded by reg.mu
}

// Host is the long-lived state of one endpoint address within a Shared: what
// least request and outlier detection need to remember across configurations.
type Host struct {
	Addr netip.AddrPort
	// Outlier is the host's outlier state (ejected or not, counts): the pickers
	// read it, Cluster.Observe feeds it, the Shared's detector owns the rest.
	Outlier outlier.Host

	addr   string       // Addr.String(), computed once
	active atomic.Int64 // requests in flight; owned by Begin/End
	mark   uint64       // Retain's sweep generation; guarded by the registry's mu
}

func newHost(a netip.AddrPort) *Host {
	h := &Host{Addr: a, addr: a.String()}
	h.Outlier.Addr = h.addr
	return h
}

// Address is the dialable "ip:port".
func (h *Host) Address() string { return h.addr }

// Begin marks a request to h in flight; End ends it.
func (h *Host) Begin() { h.active.Add(1) }

// End ends a request started with Begin.
func (h *Host) End() { h.active.Add(-1) }

// Active reports requests in flight, over every configuration and subset cluster.
func (h *Host) Active() int64 { return h.active.Load() }

// ServiceKey is the key under which a cluster's long-lived state is kept: the name
// with the subset removed for an outbound cluster (clustername.ServiceKey, the rule
// pilot maps reported ejections by too).
func ServiceKey(name string) string { return clustername.ServiceKey(name) }

// Shared returns key's entry, creating it (its breaker at circuitbreak.DefaultLimits
// until the compile that asked for it applies the cluster's).
func (r *Registry) Shared(key string) *Shared {
	r.mu.Lock()
	defer r.mu.Unlock()
	s := r.shared[key]
	if s == nil {
		b, _ := circuitbreak.New(circuitbreak.DefaultLimits) // valid by construction
		s = &Shared{Key: key, Breaker: b, Outlier: outlier.New(key, &r.totals), Limiter: new(ratelimit.Limiter), reg: r, hosts: make(map[netip.AddrPort]*Host)}
		r.shared[key] = s
	}
	return s
}

// Host returns a's entry, creating it.
func (s *Shared) Host(a netip.AddrPort) *Host {
	s.reg.mu.Lock()
	defer s.reg.mu.Unlock()
	h := s.hosts[a]
	if h == nil {
		h = newHost(a)
		s.hosts[a] = h
	}
	return h
}

// Hosts returns s's hosts in address order (a copy).
func (s *Shared) Hosts() []*Host {
	s.reg.mu.Lock()
	hs := make([]*Host, 0, len(s.hosts))
	for _, h := range s.hosts {
		hs = append(hs, h)
	}
	s.reg.mu.Unlock()
	slices.SortFunc(hs, func(a, b *Host) int { return a.Addr.Compare(b.Addr) })
	return hs
}

// All returns every entry in key order (a copy): for /metrics and admin.
func (r *Registry) All() []*Shared {
	r.mu.Lock()
	all := make([]*Shared, 0, len(r.shared))
	for _, s := range r.shared {
		all = append(all, s)
	}
	r.mu.Unlock()
	slices.SortFunc(all, func(a, b *Shared) int { return strings.Compare(a.Key, b.Key) })
	return all
}

// Len reports the number of entries.
func (r *Registry) Len() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return len(r.shared)
}

// Retain retires every entry of r that no cluster in live uses, and every host no
// endpoint of live uses: live is the configuration just swapped in. Clusters whose
// Shared belongs to another registry are ignored.
func (r *Registry) Retain(live []*Cluster) {
	// Configurations and members changed, so the detectors' next ticks may have:
	// wake the outlier goroutine, after the unlock (no send under a lock).
	defer r.outliers.Poke()
	r.mu.Lock()
	defer r.mu.Unlock()
	// A fresh mark per sweep: what live reaches gets it, the rest goes.
	r.gen++
	gen := r.gen
	for _, c := range live {
		s := c.Shared
		if s == nil || s.reg != r || r.shared[s.Key] != s {
			continue
		}
		s.mark = gen
		for _, e := range c.endpoints {
			if e.Host != nil {
				e.Host.mark = gen
			}
		}
	}
	for k, s := range r.shared {
		if s.mark != gen {
			delete(r.shared, k)
			continue
		}
		for a, h := range s.hosts {
			if h.mark != gen {
				delete(s.hosts, a)
			}
		}
		s.syncOutlierLocked()
	}
}
