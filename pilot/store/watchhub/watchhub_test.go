package watchhub

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/weft-mesh/weft/pilot/resource"
	"github.com/weft-mesh/weft/pilot/store"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// fakeStore is the smallest store a Hub serves: a revision counter whose
// history is every revision it published (one event each), under one lock.
type fakeStore struct {
	mu        sync.Mutex
	rev       store.Revision
	compacted store.Revision
	hist      []store.Event // hist[i] is revision i+1
	done      chan struct{}
	hub       *Hub
	readErr   error  // returned by the catch-up read when set
	onRead    func() // called by a failing read before it returns
}

func newFake(limit int) *fakeStore {
	f := &fakeStore{done: make(chan struct{})}
	f.hub = New(&f.mu, limit, f.done, func() (store.Revision, store.Revision) { return f.rev, f.compacted }, f.read)
	return f
}

// read is the catch-up: at most 2 revisions a call, to cross chunk edges.
func (f *fakeStore) read(_ context.Context, after, upTo store.Revision) ([]store.Event, store.Revision, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.readErr != nil {
		if f.onRead != nil {
			f.onRead()
		}
		return nil, 0, f.readErr
	}
	end := min(upTo, after+2)
	return append([]store.Event(nil), f.hist[after:end]...), end, nil
}

// publish commits one revision and queues it, waking after the lock.
func (f *fakeStore) publish() (cut int) {
	f.mu.Lock()
	f.rev++
	ev := store.Event{Revision: f.rev, Op: store.OpPut, Object: &resource.Object{Kind: "Service", Metadata: resource.Metadata{Name: fmt.Sprint(f.rev)}}}
	f.hist = append(f.hist, ev)
	wake, cut := f.hub.Publish([]store.Event{ev})
	f.mu.Unlock()
	wake.Wake()
	return cut
}

func (f *fakeStore) close() {
	f.mu.Lock()
	f.hub.Close()
	f.mu.Unlock()
	close(f.done)
	f.hub.Wait()
}

// recv reads n events and checks they are revisions first, first+1, ...
func recv(t *testing.T, w store.Watcher, first store.Revision, n int) {
	t.Helper()
	for i := range n {
		select {
		case ev, ok := <-w.Events():
			if !ok {
				t.Fatalf("closed after %d of %d events: %v", i, n, w.Err())
			}
			if want := first + store.Revision(i); ev.Revision != want {
				t.Fatalf("event %d: revision %d, want %d (a gap or a repeat)", i, ev.Revision, want)
			}
		case <-time.After(10 * time.Second):
			t.Fatalf("no event %d of %d within 10s", i, n)
		}
	}
}

// ended waits for Events to close and returns Err.
func ended(t *testing.T, w store.Watcher) error {
	t.Helper()
	for {
		select {
		case _, ok := <-w.Events():
			if !ok {
				return w.Err()
			}
		case <-time.After(10 * time.Second):
			t.Fatal("watch did not end within 10s")
		}
	}
}

// TestCatchUpThenLive: history before the subscription is read in chunks, then
// live revisions follow, including those published during the catch-up, with no
// gap and no repeat at the boundary.
func TestCatchUpThenLive(t *testing.T) {
	f := newFake(16)
	defer f.close()
	for range 5 {
		f.publish()
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	w, err := f.hub.Watch(ctx, 1)
	if err != nil {
		t.Fatal(err)
	}
	for range 3 {
		f.publish()
	}
	recv(t, w, 2, 7)
	cancel()
	if err := ended(t, w); err != nil {
		t.Fatalf("Err after ctx end = %v, want nil", err)
	}
}

// TestOverflowAtLimit: a watcher that reads nothing is cut off with
// ErrWatchOverflow when one more revision comes with limit already pending
// (the publisher is told); another watcher is unaffected.
func TestOverflowAtLimit(t *testing.T) {
	const limit = 4
	f := newFake(limit)
	defer f.close()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	slow, err := f.hub.Watch(ctx, 0)
	if err != nil {
		t.Fatal(err)
	}
	// Its goroutine may have taken what was pending when it woke (up to limit
	// revisions, blocked sending the first of them), so with nothing read it is
	// cut off once limit more are pending: after 2*limit+1 revisions at most.
	cuts := 0
	for cuts == 0 {
		if f.rev == 2*limit+1 {
			t.Fatalf("not cut off after %d revisions with limit %d", f.rev, limit)
		}
		cuts += f.publish()
	}
	if f.rev <= limit {
		t.Fatalf("cut off at revision %d, within the limit %d", f.rev, limit)
	}
	if cuts != 1 {
		t.Fatalf("Publish reported %d cut, want 1", cuts)
	}
	if err := ended(t, slow); !errors.Is(err, store.ErrWatchOverflow) {
		t.Fatalf("slow watcher's Err = %v, want ErrWatchOverflow", err)
	}
	other, err := f.hub.Watch(ctx, 0)
	if err != nil {
		t.Fatal(err)
	}
	recv(t, other, 1, int(f.rev))
}

// TestBufferHoldsLimit: limit revisions pending is not an overflow.
func TestBufferHoldsLimit(t *testing.T) {
	const limit = 4
	f := newFake(limit)
	defer f.close()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	w, err := f.hub.Watch(ctx, 0)
	if err != nil {
		t.Fatal(err)
	}
	for range limit {
		if cut := f.publish(); cut != 0 {
			t.Fatalf("cut off at revision %d with limit %d", f.rev, limit)
		}
	}
	recv(t, w, 1, limit)
}

// TestCutAll: every watcher ends with the given error; later ones start anew.
func TestCutAll(t *testing.T) {
	f := newFake(16)
	defer f.close()
	w, err := f.hub.Watch(context.Background(), 0)
	if err != nil {
		t.Fatal(err)
	}
	f.publish()
	recv(t, w, 1, 1)
	reload := fmt.Errorf("reloaded: %w", store.ErrCompacted)
	f.mu.Lock()
	f.hub.CutAll(reload)
	f.mu.Unlock()
	if err := ended(t, w); !errors.Is(err, store.ErrCompacted) {
		t.Fatalf("Err after CutAll = %v, want ErrCompacted", err)
	}
	if cut := f.publish(); cut != 0 {
		t.Fatalf("a cut watcher was still in the hub (%d cut)", cut)
	}
}

// TestWatchRefused: a cancelled ctx, a negative revision, a compacted one and a
// closed store are refused with their errors, in that order of checks.
func TestWatchRefused(t *testing.T) {
	f := newFake(16)
	for range 3 {
		f.publish()
	}
	f.compacted = 3
	cancelled, cancel := context.WithCancel(context.Background())
	cancel()
	for _, tc := range []struct {
		ctx  context.Context
		from store.Revision
		want error
	}{
		{cancelled, 2, context.Canceled},
		{context.Background(), -1, store.ErrInvalid},
		{context.Background(), 1, store.ErrCompacted},
	} {
		if w, err := f.hub.Watch(tc.ctx, tc.from); !errors.Is(err, tc.want) || w != nil {
			t.Errorf("Watch(from %d) = %v, %v; want nil, %v", tc.from, w, err, tc.want)
		}
	}
	// From 2 (the first retained revision is 3) is allowed.
	w, err := f.hub.Watch(context.Background(), 2)
	if err != nil {
		t.Fatal(err)
	}
	recv(t, w, 3, 1)
	f.close()
	if err := ended(t, w); !errors.Is(err, store.ErrClosed) {
		t.Fatalf("Err after close = %v, want ErrClosed", err)
	}
	if w, err := f.hub.Watch(context.Background(), 3); !errors.Is(err, store.ErrClosed) || w != nil {
		t.Fatalf("Watch after close = %v, %v; want nil, ErrClosed", w, err)
	}
}

// TestCatchUpError: a failing history read ends the watch with its error, and
// a watch whose ctx ended meanwhile ends without one.
func TestCatchUpError(t *testing.T) {
	f := newFake(16)
	defer f.close()
	f.publish()
	boom := errors.New("disk gone")
	f.mu.Lock()
	f.readErr = boom
	f.mu.Unlock()
	w, err := f.hub.Watch(context.Background(), 0)
	if err != nil {
		t.Fatal(err)
	}
	if err := ended(t, w); !errors.Is(err, boom) {
		t.Fatalf("Err = %v, want the read's error", err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	f.mu.Lock()
	f.onRead = cancel // the watch's ctx ends while its read fails
	f.mu.Unlock()
	w, err = f.hub.Watch(ctx, 0)
	if err != nil {
		t.Fatal(err)
	}
	if err := ended(t, w); err != nil {
		t.Fatalf("Err of a watch whose ctx ended during a failing read = %v, want nil", err)
	}
}
