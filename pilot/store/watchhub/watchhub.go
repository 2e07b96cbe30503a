// Package watchhub is the watch half that Weft's stores (boltstore, etcdstore)
// share. Each Watch is a Watcher whose own goroutine is the only sender on its
// channel: it catches up from the store's history, then forwards the revisions
// the store published meanwhile. A store publishes a committed revision to its
// Hub, which only appends it to each watcher's bounded queue and wakes it after
// the store's lock is released, so a publisher never blocks on a slow consumer
// and never sends while holding a lock; a watcher whose queue is full is cut off
// with store.ErrWatchOverflow (DESIGN.md convention 5).
package watchhub

import (
	"context"
	"fmt"
	"sync"

	"github.com/weft-mesh/weft/pilot/store"
)

// CatchUp reads the events of the revisions after+1..upTo, or of a first part of
// them, and returns them with the last revision it covered. A watcher calls it
// until it has reached the revision that was current when it subscribed. ctx is
// the watch's.
type CatchUp func(ctx context.Context, after, upTo store.Revision) ([]store.Event, store.Revision, error)

// Head reports the store's revision and the revision before which its history
// is gone; called with the store's lock held.
type Head func() (rev, compacted store.Revision)

// Hub is one store's set of live watchers. It has no lock of its own: it uses
// the store's (given to New), the one that orders the store's revisions and
// guards its head, so queues fill in revision order and a watcher starts at
// the head it subscribed at. Publish, CutAll and Close are called with that
// lock held; Watch takes it.
type Hub struct {
	mu    sync.Locker     // the store's lock: guards watchers and closed
	limit int             // revisions pending per watcher before it is cut off
	done  <-chan struct{} // closed when the store closes: stops every watcher
	head  Head
	read  CatchUp
	wg    sync.WaitGroup // the watchers' goroutines

	watchers map[*Watcher]struct{}
	closed   bool
}

// New returns the Hub of a store whose lock is mu, whose watchers may have limit
// revisions pending (>= 1), which closes done when it closes, whose head is
// head, and whose history read catches watchers up.
func New(mu sync.Locker, limit int, done <-chan struct{}, head Head, read CatchUp) *Hub {
	return &Hub{mu: mu, limit: limit, done: done, head: head, read: read, watchers: make(map[*Watcher]struct{})}
}

// Watch is store.Store's Watch: it subscribes first, then catches up from the
// store's history up to the revision current at subscription, then forwards
// live revisions (see run).
func (h *Hub) Watch(ctx context.Context, from store.Revision) (store.Watcher, error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	if from < 0 {
		return nil, fmt.Errorf("watch: %w: revision %d is negative", store.ErrInvalid, from)
	}
	if h.closed {
		return nil, store.ErrClosed
	}
	head, compacted := h.head()
	if from+1 < compacted {
		return nil, fmt.Errorf("watch from %d: history before %d: %w", from, compacted, store.ErrCompacted)
	}
	w := &Watcher{
		ctx: ctx, ch: make(chan store.Event), wake: make(chan struct{}, 1),
		kill: make(chan struct{}), limit: h.limit,
	}
	h.watchers[w] = struct{}{}
	h.wg.Add(1)
	go h.run(w, from, head)
	return w, nil
}

// Wakeups are the watchers a Publish queued a revision for; Wake them once the
// store's lock is released.
type Wakeups []*Watcher

// Wake tells each watcher that its queue grew.
func (ws Wakeups) Wake() {
	for _, w := range ws {
		select {
		case w.wake <- struct{}{}:
		default:
		}
	}
}

// Publish queues one committed revision (its events, in order) for every
// watcher. A watcher that already has its limit pending is cut off and dropped;
// cut says how many were. Called with the store's lock held.
func (h *Hub) Publish(batch []store.Event) (wake Wakeups, cut int) {
	wake = make(Wakeups, 0, len(h.watchers))
	for w := range h.watchers {
		if w.enqueue(batch) {
			wake = append(wake, w)
		} else {
			delete(h.watchers, w)
			cut++
		}
	}
	return wake, cut
}

// CutAll cuts every watcher off with err (it would miss revisions) and drops
// them. Called with the store's lock held.
func (h *Hub) CutAll(err error) {
	for w := range h.watchers {
		w.cut(err)
	}
	h.watchers = make(map[*Watcher]struct{})
}

// Close refuses new watchers (store.ErrClosed) and drops the live ones, which
// end when the store closes done. Called with the store's lock held.
func (h *Hub) Close() {
	h.closed = true
	h.watchers = nil
}

// Wait waits for every watcher's goroutine to end (after done is closed).
// Called without the store's lock.
func (h *Hub) Wait() { h.wg.Wait() }

// run is w's goroutine: it catches up from..subscribed with the store's history,
// then forwards queued revisions after the last one it sent; a queued revision
// the catch-up already covered is dropped, so the boundary has no gap and no
// repeat. It ends when the watch's ctx does, the store closes (ErrClosed) or w
// is cut off.
func (h *Hub) run(w *Watcher, from, subscribed store.Revision) {
	defer h.wg.Done()
	defer close(w.ch)
	defer h.unsubscribe(w)
	last := from
	for last < subscribed {
		evs, upTo, err := h.read(w.ctx, last, subscribed)
		if err != nil {
			if w.ctx.Err() == nil { // a watch ended by its ctx has no error
				w.finish(err)
			}
			return
		}
		if !w.sendAll(h.done, evs) {
			return
		}
		last = upTo
	}
	for {
		for _, batch := range w.take() {
			rev := batch[0].Revision
			if rev <= last {
				continue
			}
			if !w.sendAll(h.done, batch) {
				return
			}
			last = rev
		}
		select {
		case <-w.wake:
		case <-w.ctx.Done():
			return
		case <-h.done:
			w.finish(store.ErrClosed)
			return
		case <-w.kill:
			w.finishCut("after", last)
			return
		}
	}
}

func (h *Hub) unsubscribe(w *Watcher) {
	h.mu.Lock()
	delete(h.watchers, w)
	h.mu.Unlock()
}

// Watcher is one Watch (store.Watcher).
type Watcher struct {
	ctx   context.Context
	ch    chan store.Event
	wake  chan struct{} // cap 1: "pending may have grown"
	kill  chan struct{} // closed when cut off (buffer overflow, CutAll)
	limit int

	mu      sync.Mutex // guards the fields below
	pending [][]store.Event
	killed  bool
	cutErr  error // why it was cut off
	err     error
}

// Events is the watch's channel, closed when the watch ends.
func (w *Watcher) Events() <-chan store.Event { return w.ch }

// Err says why the watch ended, once Events is closed: nil when its ctx ended.
func (w *Watcher) Err() error {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.err
}

// enqueue adds one revision; it reports false (and cuts the watcher off) when
// the watcher already has limit revisions pending.
func (w *Watcher) enqueue(batch []store.Event) bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.killed {
		return false
	}
	if len(w.pending) >= w.limit {
		w.killLocked(store.ErrWatchOverflow)
		return false
	}
	w.pending = append(w.pending, batch)
	return true
}

func (w *Watcher) cut(err error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if !w.killed {
		w.killLocked(err)
	}
}

func (w *Watcher) killLocked(err error) {
	w.killed, w.pending, w.cutErr = true, nil, err
	close(w.kill)
}

func (w *Watcher) take() [][]store.Event {
	w.mu.Lock()
	defer w.mu.Unlock()
	p := w.pending
	w.pending = nil
	return p
}

// finish records why the watch ended; the first reason stays.
func (w *Watcher) finish(err error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.err == nil {
		w.err = err
	}
}

// finishCut records the cut (where: "at" the revision it could not send, or
// "after" the last one it sent).
func (w *Watcher) finishCut(where string, rev store.Revision) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.err == nil {
		w.err = fmt.Errorf("watch %s revision %d: %w", where, rev, w.cutErr)
	}
}

// send delivers one event or reports why it cannot (ctx end, store closed, cut).
func (w *Watcher) send(done <-chan struct{}, ev store.Event) bool {
	select {
	case w.ch <- ev:
		return true
	case <-w.ctx.Done():
	case <-done:
		w.finish(store.ErrClosed)
	case <-w.kill:
		w.finishCut("at", ev.Revision)
	}
	return false
}

func (w *Watcher) sendAll(done <-chan struct{}, evs []store.Event) bool {
	for _, ev := range evs {
		if !w.send(done, ev) {
			return false
		}
	}
	return true
}
