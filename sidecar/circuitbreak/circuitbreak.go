// Package circuitbreak counts a Service's in-use resources against Envoy-style
// circuit-breaker thresholds and the retry budget. It is pure bookkeeping: no
// clock, no I/O, lock-free. A Breaker outlives configurations: SetLimits changes
// its thresholds in place and keeps its counts, so a config swap never lets a
// limit be exceeded by requests counted in the breaker it replaced.
package circuitbreak

import (
	"fmt"
	"math"
	"sync/atomic"
)

// Resource is one counted thing.
type Resource uint8

// Counted resources.
const (
	Connections Resource = iota
	Pending
	Requests
	Retries
	numResources
)

func (r Resource) String() string {
	return [...]string{"connections", "pending", "requests", "retries"}[r]
}

// Limit names the threshold that refused an admission: its String is the API field
// name (DestinationPolicy.connectionPool), which the x-weft-overflow header and the
// /metrics label carry.
type Limit uint8

// Limits that can overflow.
const (
	MaxConnections Limit = iota
	MaxPendingRequests
	MaxRequests
	MaxRetries
	RetryBudget
	NumLimits
)

func (l Limit) String() string {
	return [...]string{"maxConnections", "maxPendingRequests", "maxRequests", "maxRetries", "retryBudget"}[l]
}

// Envoy's defaults when a cluster sets no threshold, and of a retry_budget that
// names no field.
var DefaultLimits = Limits{MaxConnections: 1024, MaxPendingRequests: 1024, MaxRequests: 1024, MaxRetries: 3}

// Default retry budget fields (Envoy's).
const (
	DefaultBudgetPercent        = 20.0
	DefaultBudgetMinConcurrency = 3
)

// Limits are the thresholds; each must be positive except MaxRetries (0: no retries).
type Limits struct {
	MaxConnections     uint32
	MaxPendingRequests uint32
	MaxRequests        uint32
	MaxRetries         uint32
	// Budget, when set, also bounds concurrent retries (see Allowed).
	Budget *Budget
}

// Budget is a retry budget: concurrent retries may be Percent of the active and
// pending requests, but at least MinConcurrency.
type Budget struct {
	Percent        float64 // 0..100
	MinConcurrency uint32
}

// Check reports whether l can be used.
func (l Limits) Check() error {
	if l.MaxConnections == 0 || l.MaxPendingRequests == 0 || l.MaxRequests == 0 {
		return fmt.Errorf("circuitbreak: max connections, pending and requests must be positive: %s", l)
	}
	if b := l.Budget; b != nil && (math.IsNaN(b.Percent) || b.Percent < 0 || b.Percent > 100) {
		return fmt.Errorf("circuitbreak: retry budget percent must be 0..100, got %v", b.Percent)
	}
	return nil
}

// Equal reports whether l and o set the same thresholds.
func (l Limits) Equal(o Limits) bool {
	a, b := l, o
	a.Budget, b.Budget = nil, nil
	if a != b || (l.Budget == nil) != (o.Budget == nil) {
		return false
	}
	return l.Budget == nil || *l.Budget == *o.Budget
}

func (l Limits) String() string {
	s := fmt.Sprintf("maxConnections %d, maxPendingRequests %d, maxRequests %d, maxRetries %d",
		l.MaxConnections, l.MaxPendingRequests, l.MaxRequests, l.MaxRetries)
	if b := l.Budget; b != nil {
		s += fmt.Sprintf(", retryBudget %v%% min %d", b.Percent, b.MinConcurrency)
	}
	return s
}

// BudgetAllowed is the retry budget's allowance: the concurrent retries that
// percent% of active (active plus pending requests, as Envoy counts them) allows,
// rounded down (Envoy converts the product to an integer), but at least
// minConcurrency. The product is formed as percent×active/100 so integer percents
// are exact (0.29×100 would round to 28.999...).
func BudgetAllowed(percent float64, minConcurrency uint32, active int64) int64 {
	n := int64(math.Floor(percent * float64(max(active, 0)) / 100))
	return max(n, int64(minConcurrency))
}

// Breaker counts in-use resources. Safe for concurrent use.
type Breaker struct {
	// lim is replaced whole by SetLimits, so an admission reads one consistent set
	// with one atomic load.
	lim       atomic.Pointer[Limits]
	inUse     [numResources]atomic.Int64
	overflows [NumLimits]atomic.Uint64
}

// New checks l and returns a Breaker with all counts zero.
func New(l Limits) (*Breaker, error) {
	b := &Breaker{}
	if err := b.SetLimits(l); err != nil {
		return nil, err
	}
	return b, nil
}

// SetLimits replaces the thresholds in place, keeping every count. A limit lowered
// below what is in use refuses new admissions until releases bring the count below
// it; nothing in use is revoked.
func (b *Breaker) SetLimits(l Limits) error {
	if err := l.Check(); err != nil {
		return err
	}
	if l.Budget != nil {
		bc := *l.Budget
		l.Budget = &bc // the caller's value may change later
	}
	b.lim.Store(&l)
	return nil
}

// Limits returns the thresholds in force.
func (b *Breaker) Limits() Limits {
	l := *b.lim.Load()
	if l.Budget != nil {
		bc := *l.Budget
		l.Budget = &bc
	}
	return l
}

// limit is the threshold on r now and the Limit named when it refuses.
func (b *Breaker) limit(r Resource) (int64, Limit) {
	l := b.lim.Load()
	switch r {
	case Connections:
		return int64(l.MaxConnections), MaxConnections
	case Pending:
		return int64(l.MaxPendingRequests), MaxPendingRequests
	case Requests:
		return int64(l.MaxRequests), MaxRequests
	}
	n, which := int64(l.MaxRetries), MaxRetries
	if bg := l.Budget; bg != nil {
		if a := BudgetAllowed(bg.Percent, bg.MinConcurrency, b.inUse[Requests].Load()+b.inUse[Pending].Load()); a < n {
			n, which = a, RetryBudget
		}
	}
	return n, which
}

// Acquire takes one unit of r; false (and an overflow counted) when at the limit.
// For Retries the limit is the smaller of MaxRetries and the retry budget.
func (b *Breaker) Acquire(r Resource) bool {
	_, ok := b.Admit(r)
	return ok
}

// Admit is Acquire that also names the limit that refused (meaningless when ok).
func (b *Breaker) Admit(r Resource) (refused Limit, ok bool) {
	refused, ok = b.take(r)
	if !ok {
		b.overflows[refused].Add(1)
	}
	return refused, ok
}

// TryAcquire is Admit without counting an overflow: for a caller that waits (the
// connection pool queues a request refused a connection) and counts with
// CountOverflow only when it gives up.
func (b *Breaker) TryAcquire(r Resource) (refused Limit, ok bool) { return b.take(r) }

func (b *Breaker) take(r Resource) (Limit, bool) {
	max, which := b.limit(r)
	// CAS rather than add-then-undo so the count never transiently exceeds the limit.
	for {
		n := b.inUse[r].Load()
		if n >= max {
			return which, false
		}
		if b.inUse[r].CompareAndSwap(n, n+1) {
			return which, true
		}
	}
}

// Available reports whether one more r would be admitted now (a hint: another
// caller may take it first).
func (b *Breaker) Available(r Resource) bool {
	max, _ := b.limit(r)
	return b.inUse[r].Load() < max
}

// Max is the threshold on r now: for Retries the smaller of MaxRetries and the
// retry budget's allowance (for /metrics).
func (b *Breaker) Max(r Resource) int64 {
	n, _ := b.limit(r)
	return n
}

// CountOverflow counts one request refused by l.
func (b *Breaker) CountOverflow(l Limit) { b.overflows[l].Add(1) }

// Release returns one unit of r taken by a successful Acquire.
func (b *Breaker) Release(r Resource) {
	if b.inUse[r].Add(-1) < 0 {
		panic("circuitbreak: release without acquire of " + r.String())
	}
}

// InUse reports the current count of r.
func (b *Breaker) InUse(r Resource) int64 { return b.inUse[r].Load() }

// Overflows reports how many requests l refused.
func (b *Breaker) Overflows(l Limit) uint64 { return b.overflows[l].Load() }
