// Package overload holds the sidecar's own overload bounds: concurrency limits
// (connections, requests) counted with atomics, and a memory guard that samples the
// Go runtime's memory on a ticker so the request path reads one atomic bool.
//
// Nothing here blocks or allocates on the request path: Acquire is an atomic add,
// Shedding an atomic load.
package overload

import (
	"errors"
	"fmt"
	"sync/atomic"
)

// ErrConfig wraps every configuration error of this package.
var ErrConfig = errors.New("overload: invalid config")

// MaxLimit bounds a Limit's maximum (far above any real sidecar's file descriptors).
const MaxLimit = 1 << 24

// Limit bounds how many holders exist at once (connections, requests). A nil *Limit
// is unlimited and counts nothing, so optional limits need no checks at call sites.
// Safe for concurrent use.
type Limit struct {
	name    string
	max     int64
	cur     atomic.Int64
	refused atomic.Uint64
}

// NewLimit returns a limit of max holders, 1..MaxLimit. name says which limit
// refused (the x-weft-overflow value, a metric label).
func NewLimit(name string, max int) (*Limit, error) {
	if name == "" {
		return nil, fmt.Errorf("%w: limit name required", ErrConfig)
	}
	if max < 1 || max > MaxLimit {
		return nil, fmt.Errorf("%w: limit %s: %d outside 1..%d", ErrConfig, name, max, MaxLimit)
	}
	return &Limit{name: name, max: int64(max)}, nil
}

// Acquire takes one slot; false (counted as refused) when the limit is reached.
// Every true must be paired with one Release.
func (l *Limit) Acquire() bool {
	if l == nil {
		return true
	}
	// Add first, then undo: one atomic op on the common path, no CAS loop. A
	// refused caller briefly over-counts by one, which can only refuse another
	// caller racing at the bound, never admit one past it.
	if l.cur.Add(1) > l.max {
		l.cur.Add(-1)
		l.refused.Add(1)
		return false
	}
	return true
}

// Release returns a slot taken by Acquire.
func (l *Limit) Release() {
	if l != nil {
		l.cur.Add(-1)
	}
}

// Name is the limit's name.
func (l *Limit) Name() string {
	if l == nil {
		return ""
	}
	return l.name
}

// Max is the limit (0 for a nil, unlimited Limit).
func (l *Limit) Max() int64 {
	if l == nil {
		return 0
	}
	return l.max
}

// Current is the number of slots held.
func (l *Limit) Current() int64 {
	if l == nil {
		return 0
	}
	return max(l.cur.Load(), 0)
}

// Refused counts Acquire calls refused since the limit was made.
func (l *Limit) Refused() uint64 {
	if l == nil {
		return 0
	}
	return l.refused.Load()
}
