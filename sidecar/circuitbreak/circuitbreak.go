// Package circuitbreak counts a cluster's in-use resources against Envoy-style
// circuit-breaker thresholds. It is pure bookkeeping: no clock, no I/O, lock-free.
package circuitbreak

import (
	"fmt"
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

// Limits are the thresholds; each must be positive except MaxRetries (0: no retries).
type Limits struct {
	MaxConnections     uint32
	MaxPendingRequests uint32
	MaxRequests        uint32
	MaxRetries         uint32
}

// Breaker counts in-use resources. Safe for concurrent use.
type Breaker struct {
	max       [numResources]int64
	inUse     [numResources]atomic.Int64
	overflows [numResources]atomic.Uint64
}

// New checks l and returns a Breaker with all counts zero.
func New(l Limits) (*Breaker, error) {
	if l.MaxConnections == 0 || l.MaxPendingRequests == 0 || l.MaxRequests == 0 {
		return nil, fmt.Errorf("circuitbreak: max connections, pending and requests must be positive: %+v", l)
	}
	b := &Breaker{}
	b.max[Connections] = int64(l.MaxConnections)
	b.max[Pending] = int64(l.MaxPendingRequests)
	b.max[Requests] = int64(l.MaxRequests)
	b.max[Retries] = int64(l.MaxRetries)
	return b, nil
}

// Acquire takes one unit of r; false (and an overflow counted) when at the limit.
func (b *Breaker) Acquire(r Resource) bool {
	// CAS rather than add-then-undo so the count never transiently exceeds the limit.
	for {
		n := b.inUse[r].Load()
		if n >= b.max[r] {
			b.overflows[r].Add(1)
			return false
		}
		if b.inUse[r].CompareAndSwap(n, n+1) {
			return true
		}
	}
}

// Release returns one unit of r taken by a successful Acquire.
func (b *Breaker) Release(r Resource) {
	if b.inUse[r].Add(-1) < 0 {
		panic("circuitbreak: release without acquire of " + r.String())
	}
}

// InUse reports the current count of r.
func (b *Breaker) InUse(r Resource) int64 { return b.inUse[r].Load() }

// Overflows reports how many Acquire calls for r were refused.
func (b *Breaker) Overflows(r Resource) uint64 { return b.overflows[r].Load() }
