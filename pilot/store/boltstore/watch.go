package boltstore

import (
	"context"
	"errors"
	"fmt"
	"sync"

	bolt "go.etcd.io/bbolt"

	"github.com/weft-mesh/weft/pilot/store"
)

// watcher is one Watch. Appliers only append to pending (bounded) and wake it; its
// own goroutine (run) is the only sender on ch, so appliers never block on it.
type watcher struct {
	ctx   context.Context
	ch    chan store.Event
	wake  chan struct{} // cap 1: "pending may have grown"
	kill  chan struct{} // closed when the buffer overflowed
	limit int

	mu      sync.Mutex // guards the fields below
	pending [][]store.Event
	killed  bool
	err     error
}

func (w *watcher) Events() <-chan store.Event { return w.ch }

func (w *watcher) Err() error {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.err
}

// enqueue adds one committed revision; it reports false (and cuts the watcher off)
// when the watcher already has limit revisions pending.
func (w *watcher) enqueue(batch []store.Event) bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.killed {
		return false
	}
	if len(w.pending) >= w.limit {
		w.killed, w.pending = true, nil
		close(w.kill)
		return false
	}
	w.pending = append(w.pending, batch)
	return true
}

func (w *watcher) wakeUp() {
	select {
	case w.wake <- struct{}{}:
	default:
	}
}

func (w *watcher) take() [][]store.Event {
	w.mu.Lock()
	defer w.mu.Unlock()
	p := w.pending
	w.pending = nil
	return p
}

func (w *watcher) finish(err error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.err == nil {
		w.err = err
	}
}

// send delivers one event or reports why it cannot (ctx end, store closed, cut off).
func (w *watcher) send(done <-chan struct{}, ev store.Event) bool {
	select {
	case w.ch <- ev:
		return true
	case <-w.ctx.Done():
	case <-done:
		w.finish(store.ErrClosed)
	case <-w.kill:
		w.finish(fmt.Errorf("watch at revision %d: %w", ev.Revision, store.ErrWatchOverflow))
	}
	return false
}

func (w *watcher) sendAll(done <-chan struct{}, evs []store.Event) bool {
	for _, ev := range evs {
		if !w.send(done, ev) {
			return false
		}
	}
	return true
}

// Watch subscribes first, then catches up from disk up to the revision current at
// subscription, then forwards live revisions after that; live revisions the
// catch-up already covered are dropped, so the boundary has no gap and no repeat.
func (s *Store) Watch(ctx context.Context, from store.Revision) (store.Watcher, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	if from < 0 {
		return nil, fmt.Errorf("watch: %w: revision %d is negative", store.ErrInvalid, from)
	}
	w := &watcher{
		ctx: ctx, ch: make(chan store.Event), wake: make(chan struct{}, 1),
		kill: make(chan struct{}), limit: s.cfg.watchBuffer,
	}
	s.stateMu.Lock()
	if s.closed {
		s.stateMu.Unlock()
		return nil, store.ErrClosed
	}
	if from+1 < s.compacted {
		comp := s.compacted
		s.stateMu.Unlock()
		return nil, fmt.Errorf("watch from %d: history before %d: %w", from, comp, store.ErrCompacted)
	}
	s.watchers[w] = struct{}{}
	subscribed := s.rev
	s.wg.Add(1)
	s.stateMu.Unlock()
	go s.runWatch(w, from, subscribed)
	return w, nil
}

func (s *Store) runWatch(w *watcher, from, subscribed store.Revision) {
	defer s.wg.Done()
	defer close(w.ch)
	defer s.unsubscribe(w)
	last := from
	for last < subscribed {
		evs, upTo, err := s.readHistory(last, subscribed)
		if err != nil {
			w.finish(err)
			return
		}
		if !w.sendAll(s.done, evs) {
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
			if !w.sendAll(s.done, batch) {
				return
			}
			last = rev
		}
		select {
		case <-w.wake:
		case <-w.ctx.Done():
			return
		case <-s.done:
			w.finish(store.ErrClosed)
			return
		case <-w.kill:
			w.finish(fmt.Errorf("watch after revision %d: %w", last, store.ErrWatchOverflow))
			return
		}
	}
}

func (s *Store) unsubscribe(w *watcher) {
	s.stateMu.Lock()
	delete(s.watchers, w)
	s.stateMu.Unlock()
}

// readHistory reads the events of revisions after+1..min(upTo, after+catchUp)
// in one short read transaction and returns them with the last revision covered.
func (s *Store) readHistory(after, upTo store.Revision) ([]store.Event, store.Revision, error) {
	end := min(upTo, after+store.Revision(s.cfg.catchUp))
	var out []store.Event
	err := s.view(func(tx *bolt.Tx) error {
		comp, err := decodeUint(tx.Bucket(bucketMeta).Get(metaCompacted))
		if err != nil {
			return err
		}
		if after+1 < store.Revision(comp) {
			return fmt.Errorf("watch catch-up from %d: history before %d: %w", after, comp, store.ErrCompacted)
		}
		c := tx.Bucket(bucketHistory).Cursor()
		for k, v := c.Seek(histKey(after+1, 0)); k != nil; k, v = c.Next() {
			rev, err := histKeyRevision(k)
			if err != nil {
				return err
			}
			if rev > end {
				break
			}
			ev, err := decodeEvent(v)
			if err != nil {
				return err
			}
			out = append(out, ev)
		}
		return nil
	})
	if errors.Is(err, store.ErrClosed) {
		return nil, 0, err
	}
	if err != nil {
		return nil, 0, fmt.Errorf("boltstore: %w", err)
	}
	return out, end, nil
}
