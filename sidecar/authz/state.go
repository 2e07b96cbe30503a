package authz

import (
	"fmt"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// Bounds of a State.
const (
	// MaxPolicyNames bounds the distinct policy names counted apart (the policy
	// label of weft_sidecar_authz_decisions_total); later names count under
	// OtherPolicy. Names are pilot's "<ns>/<name>", so the reserved values below
	// cannot collide with one.
	MaxPolicyNames = 256
	// MaxRemembered bounds the Override sightings a State keeps: those of the
	// active configuration and absent ones whose deadline has not passed.
	MaxRemembered = 4 * MaxOverrides
)

// Reserved policy label values.
const (
	NoPolicy    = "none"  // an ALLOW set denied: no policy matched
	OtherPolicy = "other" // a name past MaxPolicyNames
)

// State is what outlives configurations: the first sighting of each Override
// revision, so that a config swap never restarts a TTL, and the decision
// counters. The sidecar creates one; every compile and the metrics read it.
// The request path never touches it (engines hold their counters' pointers).
type State struct {
	mu    sync.Mutex              // guards seen and stats
	seen  map[seenKey]*Sighting   // by Override name and revision
	stats map[string]*policyStats // by policy name, at most MaxPolicyNames
	other *policyStats
	none  *policyStats
	// changed is closed (and replaced) by a Commit that changed the sightings;
	// guarded by mu.
	changed chan struct{}
}

type seenKey struct {
	name string
	rev  int64
}

// Sighting is when this sidecar first saw one Override revision and when it
// stops enforcing it (Deadline). Live: the active configuration holds it.
type Sighting struct {
	Name      string    `json:"name"`
	Revision  int64     `json:"revision"`
	FirstSeen time.Time `json:"firstSeen"`
	Deadline  time.Time `json:"deadline"`
	Live      bool      `json:"-"`
}

// NewState returns an empty State.
func NewState() *State {
	return &State{seen: map[seenKey]*Sighting{}, stats: map[string]*policyStats{}, other: &policyStats{}, none: &policyStats{}, changed: make(chan struct{})}
}

func (s *State) firstSeen(o Override, now time.Time) time.Time {
	s.mu.Lock()
	defer s.mu.Unlock()
	if e := s.seen[seenKey{o.Name, o.Revision}]; e != nil {
		return e.FirstSeen
	}
	return now
}

// Commit records the Override sightings of the configuration just activated
// (its engines) and forgets sightings it no longer holds once their deadline has
// passed: while not yet expired, an Override that comes back (the same revision,
// say from a last-known-good) keeps its first sighting. An expired sighting the
// configuration still holds is kept too, so it never starts again. Past
// MaxRemembered the oldest absent sightings are forgotten first.
func (s *State) Commit(now time.Time, engines ...*Engine) {
	s.mu.Lock()
	defer s.mu.Unlock()
	before := len(s.seen)
	changed := false // a sighting added, gone live or not, or its deadline moved
	was := make(map[seenKey]Sighting, len(s.seen))
	for k, e := range s.seen {
		was[k] = *e
		e.Live = false
	}
	for _, eng := range engines {
		if eng == nil {
			continue
		}
		for _, g := range eng.sightings {
			k := seenKey{g.Name, g.Revision}
			e := s.seen[k]
			if e == nil {
				e = &Sighting{Name: g.Name, Revision: g.Revision, FirstSeen: g.FirstSeen}
				s.seen[k] = e
				changed = true
			}
			e.Deadline, e.Live = g.Deadline, true
		}
	}
	var absent []*Sighting
	for k, e := range s.seen {
		switch {
		case e.Live:
		case !now.Before(e.Deadline):
			delete(s.seen, k)
		default:
			absent = append(absent, e)
		}
	}
	if over := len(s.seen) - MaxRemembered; over > 0 {
		slices.SortFunc(absent, func(a, b *Sighting) int { return a.FirstSeen.Compare(b.FirstSeen) })
		for _, e := range absent[:min(over, len(absent))] {
			delete(s.seen, seenKey{e.Name, e.Revision})
		}
	}
	for k, w := range was {
		if e := s.seen[k]; e != nil && (e.Live != w.Live || !e.Deadline.Equal(w.Deadline)) {
			changed = true
		}
	}
	if changed || len(s.seen) != before {
		close(s.changed) // never blocks: watchers persist the sightings
		s.changed = make(chan struct{})
	}
}

// Changed is closed when a Commit adds or forgets a sighting, or one goes
// live or not (then replaced):
// the sidecar persists Sightings after it, off the request path.
func (s *State) Changed() <-chan struct{} {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.changed
}

// Sightings lists what the State remembers, by name then revision: for
// persisting across restarts (Restore) and for the admin view.
func (s *State) Sightings() []Sighting {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make([]Sighting, 0, len(s.seen))
	for _, e := range s.seen {
		out = append(out, *e)
	}
	slices.SortFunc(out, func(a, b Sighting) int {
		if c := strings.Compare(a.Name, b.Name); c != 0 {
			return c
		}
		return int(a.Revision - b.Revision)
	})
	return out
}

// Restore seeds the State with persisted sightings (before the first compile),
// so a restart does not start a TTL again. A sighting from the future (a clock
// stepped back) is taken as seen now: never later than it was. Entries past
// MaxRemembered are an error: the file is not ours.
func (s *State) Restore(gs []Sighting, now time.Time) error {
	if len(gs) > MaxRemembered {
		return fmt.Errorf("authz: %d override sightings, limit %d", len(gs), MaxRemembered)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, g := range gs {
		if g.Name == "" || len(g.Name) > MaxNameBytes || g.Revision < 0 {
			return fmt.Errorf("authz: override sighting %q revision %d: invalid", clip(g.Name), g.Revision)
		}
		if g.FirstSeen.After(now) {
			g.FirstSeen = now
		}
		g.Live = false
		s.seen[seenKey{g.Name, g.Revision}] = &g
	}
	return nil
}

// OverrideCounts counts the active configuration's Overrides by whether they
// are still enforced at now (for the gauges).
func (s *State) OverrideCounts(now time.Time) (active, expired int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, e := range s.seen {
		if !e.Live {
			continue
		}
		if now.Before(e.Deadline) {
			active++
		} else {
			expired++
		}
	}
	return active, expired
}

func (s *State) stat(name string) *policyStats {
	s.mu.Lock()
	defer s.mu.Unlock()
	if name == NoPolicy {
		return s.none
	}
	if p := s.stats[name]; p != nil {
		return p
	}
	if len(s.stats) >= MaxPolicyNames {
		return s.other
	}
	p := &policyStats{}
	s.stats[name] = p
	return p
}

// Metric action labels.
const (
	labelAllow uint8 = iota
	labelDeny
	labelAudit
	labelOverride
	labelExpired // authorization state past its staleness expiry: failed closed
	numLabels
)

// ActionLabels are the values of the action label, indexed as CountFunc's.
var actionLabels = [numLabels]string{"ALLOW", "DENY", "AUDIT", "OVERRIDE", "EXPIRED"}

// policyStats counts one policy name's results: [action][deny][dry run].
type policyStats struct {
	n [numLabels][2][2]atomic.Uint64
}

func (p *policyStats) add(label uint8, deny, dry bool) {
	p.n[label][b2i(deny)][b2i(dry)].Add(1)
}

func b2i(b bool) int {
	if b {
		return 1
	}
	return 0
}

// Count is one series of the decision counter.
type Count struct {
	Policy, Action string
	Deny, DryRun   bool
	N              uint64
}

// Counts lists every non-zero series, by policy name (NoPolicy and OtherPolicy
// last).
func (s *State) Counts() []Count {
	s.mu.Lock()
	names := make([]string, 0, len(s.stats))
	for n := range s.stats {
		names = append(names, n)
	}
	slices.Sort(names)
	ps := make([]*policyStats, 0, len(names)+1)
	for _, n := range names {
		ps = append(ps, s.stats[n])
	}
	names, ps = append(names, NoPolicy, OtherPolicy), append(ps, s.none, s.other)
	s.mu.Unlock()
	var out []Count
	for i, p := range ps {
		for l := range numLabels {
			for deny := range 2 {
				for dry := range 2 {
					if v := p.n[l][deny][dry].Load(); v > 0 {
						out = append(out, Count{Policy: names[i], Action: actionLabels[l], Deny: deny == 1, DryRun: dry == 1, N: v})
					}
				}
			}
		}
	}
	return out
}
