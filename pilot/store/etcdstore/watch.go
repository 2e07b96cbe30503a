package etcdstore

import (
	"context"
	"fmt"
	"sync"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/weft-mesh/weft/pilot/store"
)

// watcher is one Watch. Publishers only append to pending (bounded) and wake it;
// its own goroutine (run) is the only sender on ch, so publishers never block.
type watcher struct {
	ctx   context.Context
	ch    chan store.Event
	wake  chan struct{} // cap 1: "pending may have grown"
	kill  chan struct{} // closed when cut (buffer overflow, reload)
	limit int

	mu      sync.Mutex // guards the fields below
	pending [][]store.Event
	killed  bool
	cutErr  error // why it was cut
	err     error
}

func (w *watcher) Events() <-chan store.Event { return w.ch }

func (w *watcher) Err() error {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.err
}

// enqueue adds one revision; it reports false (and cuts the watcher) when the
// watcher already has limit revisions pending.
func (w *watcher) enqueue(batch []store.Event) bool {
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

func (w *watcher) cut(err error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if !w.killed {
		w.killLocked(err)
	}
}

func (w *watcher) killLocked(err error) {
	w.killed, w.pending, w.cutErr = true, nil, err
	close(w.kill)
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

func (w *watcher) finishCut(at store.Revision) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.err == nil {
		w.err = fmt.Errorf("watch at revision %d: %w", at, w.cutErr)
	}
}

// send delivers one event or reports why it cannot (ctx end, store closed, cut).
func (w *watcher) send(done <-chan struct{}, ev store.Event) bool {
	select {
	case w.ch <- ev:
		return true
	case <-w.ctx.Done():
	case <-done:
		w.finish(store.ErrClosed)
	case <-w.kill:
		w.finishCut(ev.Revision)
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

// Watch subscribes first, then catches up from the etcd log up to the revision
// current at subscription, then forwards live revisions; live revisions the
// catch-up covered are dropped, so the boundary has no gap and no repeat.
func (s *Store) Watch(ctx context.Context, from store.Revision) (store.Watcher, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	if from < 0 {
		return nil, fmt.Errorf("watch: %w: revision %d is negative", store.ErrInvalid, from)
	}
	w := &watcher{
		ctx: ctx, ch: make(chan store.Event), wake: make(chan struct{}, 1),
		kill: make(chan struct{}), limit: s.cfg.WatchBuffer,
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
		evs, upTo, err := s.readHistory(w.ctx, last, subscribed)
		if err != nil {
			if w.ctx.Err() == nil {
				w.finish(err)
			}
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
			w.finishCut(last)
			return
		}
	}
}

func (s *Store) unsubscribe(w *watcher) {
	s.stateMu.Lock()
	delete(s.watchers, w)
	s.stateMu.Unlock()
}

// readHistory reads the events of revisions after+1..min(upTo, after+catchUpRecords)
// at one etcd revision, checking l/compacted in the same read.
func (s *Store) readHistory(ctx context.Context, after, upTo store.Revision) ([]store.Event, store.Revision, error) {
	ctx, cancel := context.WithTimeout(ctx, s.cfg.RequestTimeout)
	defer cancel()
	end := min(upTo, after+catchUpRecords)
	resp, err := s.cli.Txn(ctx).Then(clientv3.OpGet(s.k.compacted)).Commit()
	if err != nil {
		if s.isClosed() {
			return nil, 0, store.ErrClosed
		}
		return nil, 0, fmt.Errorf("etcdstore: watch catch-up: %w", err)
	}
	if kvs := resp.Responses[0].GetResponseRange().Kvs; len(kvs) == 1 {
		comp, err := parseRevision(s.k.compacted, kvs[0].Value)
		if err != nil {
			return nil, 0, fmt.Errorf("etcdstore: %w", err)
		}
		if after+1 < comp {
			return nil, 0, fmt.Errorf("watch catch-up from %d: history before %d: %w", after, comp, store.ErrCompacted)
		}
	}
	var out []store.Event
	err = s.readRecords(ctx, after, end, resp.Header.Revision, func(_ store.Revision, evs []store.Event) error {
		out = append(out, evs...)
		return nil
	})
	if err != nil {
		if s.isClosed() {
			return nil, 0, store.ErrClosed
		}
		return nil, 0, fmt.Errorf("etcdstore: watch catch-up: %w", err)
	}
	return out, end, nil
}
