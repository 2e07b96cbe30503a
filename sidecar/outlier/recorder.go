package outlier

import (
	"fmt"
	"sync"
)

// Defaults of a Recorder.
const (
	// DefaultRecent is how many recent events /outliers shows.
	DefaultRecent = 256
	// DefaultUnlogged bounds the events waiting for the logger; beyond it they are
	// counted as dropped (the ring and the metrics still have them).
	DefaultUnlogged = 1024
	// MaxRecorded bounds both sizes.
	MaxRecorded = 1 << 16
)

// Recorder keeps a sidecar's outlier events: a bounded ring of the recent ones (the
// admin /outliers), a bounded queue the logging goroutine drains, and a wake-up
// signal for it. Record never blocks: a trip on the request path records its
// ejection and goes on.
type Recorder struct {
	wake chan struct{} // one pending signal is enough

	mu       sync.Mutex
	ring     []Event // len ≤ cap = recent size; next overwrites the oldest
	next     int
	unlogged []Event
	maxQueue int
	dropped  uint64
}

// NewRecorder returns a recorder keeping recent events and queueing at most
// unlogged for the logger; 0 means the defaults, above MaxRecorded is an error.
func NewRecorder(recent, unlogged int) (*Recorder, error) {
	if recent == 0 {
		recent = DefaultRecent
	}
	if unlogged == 0 {
		unlogged = DefaultUnlogged
	}
	if recent < 0 || recent > MaxRecorded || unlogged < 0 || unlogged > MaxRecorded {
		return nil, fmt.Errorf("outlier: recorder: recent %d and unlogged %d must be 1..%d", recent, unlogged, MaxRecorded)
	}
	return &Recorder{wake: make(chan struct{}, 1), ring: make([]Event, 0, recent), maxQueue: unlogged}, nil
}

// Record keeps evs and wakes the logger.
func (r *Recorder) Record(evs ...Event) {
	if len(evs) == 0 {
		return
	}
	r.mu.Lock()
	for _, ev := range evs {
		if len(r.ring) < cap(r.ring) {
			r.ring = append(r.ring, ev)
		} else {
			r.ring[r.next] = ev
			r.next = (r.next + 1) % len(r.ring)
		}
		if len(r.unlogged) < r.maxQueue {
			r.unlogged = append(r.unlogged, ev)
		} else {
			r.dropped++
		}
	}
	r.mu.Unlock()
	r.Poke()
}

// Poke wakes the outlier goroutine without an event (a configuration changed, so
// a detector may want a tick sooner).
func (r *Recorder) Poke() {
	select {
	case r.wake <- struct{}{}:
	default:
	}
}

// Wake is signalled after Record and Poke.
func (r *Recorder) Wake() <-chan struct{} { return r.wake }

// Take moves the events not yet logged to buf and returns it, with how many were
// dropped from the queue since the last Take.
func (r *Recorder) Take(buf []Event) ([]Event, uint64) {
	r.mu.Lock()
	defer r.mu.Unlock()
	buf = append(buf, r.unlogged...)
	clear(r.unlogged)
	r.unlogged = r.unlogged[:0]
	d := r.dropped
	r.dropped = 0
	return buf, d
}

// Recent returns the kept events, oldest first (a copy).
func (r *Recorder) Recent() []Event {
	r.mu.Lock()
	defer r.mu.Unlock()
	out := make([]Event, 0, len(r.ring))
	out = append(out, r.ring[r.next:]...)
	return append(out, r.ring[:r.next]...)
}
