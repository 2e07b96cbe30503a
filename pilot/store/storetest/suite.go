package storetest

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/weft-mesh/weft/pilot/resource"
	"github.com/weft-mesh/weft/pilot/store"
	"github.com/weft-mesh/weft/tools/testkit"
)

// Run runs the contract against fresh, empty stores made by open.
func Run(t *testing.T, open func(t *testing.T) store.Store) {
	fresh := func(t *testing.T) store.Store {
		s := open(t)
		closeStore(t, s)
		return s
	}
	tests := []struct {
		name string
		fn   func(t *testing.T, s store.Store)
	}{
		{"GetList", testGetList},
		{"CreateUpdateGeneration", testCreateUpdate},
		{"MultiObjectApplyIsOneRevision", testMultiObject},
		{"IfMatch", nil},
		{"Delete", testDelete},
		{"Invalid", nil},
		{"History", testHistory},
		{"WatchCatchUpThenLive", testWatchCatchUp},
		{"WatchConcurrentAppliers", testWatchConcurrent},
		{"WatchCancel", testWatchCancel},
		{"WatchCompacted", testWatchCompacted},
		{"SlowWatcherIsCutOff", testSlowWatcher},
		{"Close", testClose},
		{"ConcurrentApplyAndRead", testConcurrency},
		{"ConcurrentIfMatch", testConcurrentIfMatch},
		{"ContextCanceled", testContextCanceled},
		{"ApplyAtHead", testApplyAt},
	}
	for _, tc := range tests {
		switch tc.name {
		case "IfMatch":
			t.Run(tc.name, func(t *testing.T) { testIfMatch(t, fresh) })
		case "Invalid":
			t.Run(tc.name, func(t *testing.T) { testInvalid(t, fresh) })
		default:
			t.Run(tc.name, func(t *testing.T) { tc.fn(t, fresh(t)) })
		}
	}
}

func testGetList(t *testing.T, s store.Store) {
	ctx := context.Background()
	objs := []*resource.Object{
		route("default", "r", "a"), Service("other", "a", 1), Service("default", "b", 2),
		Service("default", "a", 3), meshConfig(),
	}
	var muts []store.Mutation
	for _, o := range objs {
		muts = append(muts, put(o))
	}
	res := mustApply(t, s, muts...)
	if res.Revision != 1 || !res.Changed {
		t.Fatalf("first apply: revision %d changed %v, want 1 true", res.Revision, res.Changed)
	}
	tests := []struct {
		kind, ns string
		want     []string
	}{
		{"", "", []string{"MeshConfig/mesh", "Route/default/r", "Service/default/a", "Service/default/b", "Service/other/a"}},
		{resource.KindService, "", []string{"Service/default/a", "Service/default/b", "Service/other/a"}},
		{resource.KindService, "default", []string{"Service/default/a", "Service/default/b"}},
		{"", "other", []string{"Service/other/a"}},
		{resource.KindRoute, "other", nil},
		{resource.KindWorkload, "", nil},
	}
	for _, tc := range tests {
		got, rev, err := s.List(ctx, tc.kind, tc.ns)
		if err != nil {
			t.Fatalf("List(%q, %q): %v", tc.kind, tc.ns, err)
		}
		var names []string
		for _, o := range got {
			names = append(names, o.String())
		}
		diff(t, fmt.Sprintf("List(%q, %q)", tc.kind, tc.ns), tc.want, names)
		if rev != 1 {
			t.Fatalf("List revision %d, want 1", rev)
		}
	}
	want := Service("default", "a", 3)
	want.Metadata.Generation, want.Metadata.Revision = 1, 1
	diff(t, "Get", want, mustGet(t, s, key(want)))
	_, err := s.Get(ctx, resource.Key{Kind: resource.KindService, Namespace: "default", Name: "missing"})
	wantErrIs(t, "Get missing", err, store.ErrNotFound)
}

func testCreateUpdate(t *testing.T, s store.Store) {
	base := Service("default", "a", 0)
	annotated := withLabel(base, "x", "1")
	annotated.Metadata.Annotations = map[string]string{"note": "n"}
	tests := []struct {
		name        string
		obj         *resource.Object
		wantChanged bool
		wantGen     int64
		wantRev     store.Revision
		wantHist    int
	}{
		{"create", base, true, 1, 1, 1},
		{"identical apply writes nothing", Service("default", "a", 0), false, 1, 1, 1},
		{"label change", withLabel(base, "x", "1"), true, 2, 2, 2},
		{"same labels again", withLabel(base, "x", "1"), false, 2, 2, 2},
		{"annotation change", annotated, true, 3, 3, 3},
		{"spec change", Service("default", "a", 7), true, 4, 4, 4},
		{"status change", withStatus(Service("default", "a", 7), "240.240.0.1"), true, 5, 5, 5},
		{"same status again", withStatus(Service("default", "a", 7), "240.240.0.1"), false, 5, 5, 5},
	}
	for _, tc := range tests {
		res := mustApply(t, s, put(tc.obj))
		if res.Changed != tc.wantChanged || res.Revision != tc.wantRev {
			t.Fatalf("%s: changed %v revision %d, want %v %d", tc.name, res.Changed, res.Revision, tc.wantChanged, tc.wantRev)
		}
		got := mustGet(t, s, key(base))
		if got.Metadata.Generation != tc.wantGen || got.Metadata.Revision != int64(tc.wantRev) {
			t.Fatalf("%s: generation %d revision %d, want %d %d", tc.name, got.Metadata.Generation, got.Metadata.Revision, tc.wantGen, tc.wantRev)
		}
		diff(t, tc.name+": ApplyResult object", got, res.Objects[0])
		diff(t, tc.name+": stored status", tc.obj.Status, got.Status)
		if r := mustRevision(t, s); r != tc.wantRev {
			t.Fatalf("%s: store revision %d, want %d", tc.name, r, tc.wantRev)
		}
		if h := mustHistory(t, s, key(base)); len(h) != tc.wantHist {
			t.Fatalf("%s: %d history entries, want %d", tc.name, len(h), tc.wantHist)
		}
	}
}

func testMultiObject(t *testing.T, s store.Store) {
	mustApply(t, s, put(Service("default", "keep", 0)))
	res := mustApply(t, s, put(Service("default", "a", 0)), put(Service("default", "b", 0)),
		put(Service("default", "keep", 0)), put(route("default", "r", "a")))
	if res.Revision != 2 || !res.Changed || len(res.Objects) != 4 {
		t.Fatalf("bulk apply: revision %d changed %v objects %d, want 2 true 4", res.Revision, res.Changed, len(res.Objects))
	}
	for i, o := range res.Objects {
		want := int64(2)
		if i == 2 {
			want = 1 // unchanged object keeps the revision of its last change
		}
		if o.Metadata.Revision != want {
			t.Fatalf("%s: revision %d, want %d", o, o.Metadata.Revision, want)
		}
		diff(t, "stored "+o.String(), mustGet(t, s, key(o)), o)
	}
	if r := mustRevision(t, s); r != 2 {
		t.Fatalf("store revision %d, want 2", r)
	}
}

func testIfMatch(t *testing.T, fresh func(*testing.T) store.Store) {
	a, b, c := Service("default", "a", 0), Service("default", "b", 0), Service("default", "c", 0)
	tests := []struct {
		name string
		muts []store.Mutation
		want *store.ConflictError // nil = success
	}{
		{"matching generation", []store.Mutation{putIf(Service("default", "a", 5), 2)}, nil},
		{"stale generation", []store.Mutation{putIf(Service("default", "a", 5), 1)},
			&store.ConflictError{Key: key(a), Expected: 1, Actual: 2}},
		{"zero on existing", []store.Mutation{putIf(Service("default", "a", 5), 0)},
			&store.ConflictError{Key: key(a), Expected: 0, Actual: 2}},
		{"zero on missing creates", []store.Mutation{putIf(c, 0)}, nil},
		{"generation on missing", []store.Mutation{putIf(c, 1)},
			&store.ConflictError{Key: key(c), Expected: 1, Actual: 0}},
		{"one conflict in a bulk apply writes nothing",
			[]store.Mutation{put(c), put(Service("default", "b", 9)), putIf(Service("default", "a", 5), 7)},
			&store.ConflictError{Key: key(a), Expected: 7, Actual: 2}},
		{"delete stale", []store.Mutation{delIf(key(b), 3)}, &store.ConflictError{Key: key(b), Expected: 3, Actual: 1}},
		{"delete matching", []store.Mutation{delIf(key(b), 1)}, nil},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			s := fresh(t)
			mustApply(t, s, put(a), put(b))
			mustApply(t, s, put(withLabel(a, "v", "2"))) // a at generation 2, revision 2
			beforeA, beforeB := mustHistory(t, s, key(a)), mustHistory(t, s, key(b))
			res, err := s.Apply(context.Background(), tc.muts)
			if tc.want == nil {
				if err != nil || res.Revision != 3 {
					t.Fatalf("Apply: revision %d, error %v; want revision 3", res.Revision, err)
				}
				return
			}
			wantErrIs(t, "Apply", err, store.ErrConflict)
			var ce *store.ConflictError
			if !errors.As(err, &ce) {
				t.Fatalf("error %v is not a *ConflictError", err)
			}
			diff(t, "conflict", tc.want, ce)
			if r := mustRevision(t, s); r != 2 {
				t.Fatalf("revision %d after conflict, want 2", r)
			}
			diff(t, "history of a", beforeA, mustHistory(t, s, key(a)))
			diff(t, "history of b", beforeB, mustHistory(t, s, key(b)))
			_, err = s.Get(context.Background(), key(c))
			wantErrIs(t, "Get c after conflict", err, store.ErrNotFound)
		})
	}
}

func testDelete(t *testing.T, s store.Store) {
	ctx := context.Background()
	a := Service("default", "a", 0)
	_, err := s.Apply(ctx, []store.Mutation{del(key(a))})
	wantErrIs(t, "delete missing", err, store.ErrNotFound)
	if r := mustRevision(t, s); r != 0 {
		t.Fatalf("revision %d after failed delete, want 0", r)
	}
	mustApply(t, s, put(a))
	mustApply(t, s, put(withLabel(a, "v", "2")))
	res := mustApply(t, s, del(key(a)))
	if res.Revision != 3 || !res.Changed {
		t.Fatalf("delete: revision %d changed %v, want 3 true", res.Revision, res.Changed)
	}
	_, err = s.Get(ctx, key(a))
	wantErrIs(t, "Get after delete", err, store.ErrNotFound)
	res = mustApply(t, s, put(a))
	if res.Revision != 4 || res.Objects[0].Metadata.Generation != 1 {
		t.Fatalf("re-create: revision %d generation %d, want 4 1", res.Revision, res.Objects[0].Metadata.Generation)
	}
	h := mustHistory(t, s, key(a))
	type step struct {
		Op  store.Op
		Rev store.Revision
		Gen int64
		Obj int64 // Metadata.Revision of the event's object
	}
	var got []step
	for _, ev := range h {
		got = append(got, step{ev.Op, ev.Revision, ev.Object.Metadata.Generation, ev.Object.Metadata.Revision})
	}
	diff(t, "history across delete", []step{
		{store.OpPut, 1, 1, 1}, {store.OpPut, 2, 2, 2}, {store.OpDelete, 3, 2, 3}, {store.OpPut, 4, 1, 4},
	}, got)
}

func testInvalid(t *testing.T, fresh func(*testing.T) store.Store) {
	noName := Service("default", "", 0)
	noNS := Service("", "a", 0)
	badKind := Service("default", "a", 0)
	badKind.Kind = "Gadget"
	wrongSpec := Service("default", "a", 0)
	wrongSpec.Spec = &resource.RouteSpec{}
	nilSpec := Service("default", "a", 0)
	nilSpec.Spec = nil
	nsOnClusterKind := meshConfig()
	nsOnClusterKind.Metadata.Namespace = "default"
	huge := Service("default", "huge", 0)
	huge.Metadata.Annotations = map[string]string{"blob": strings.Repeat("x", store.MaxObjectBytes)}
	tooMany := make([]store.Mutation, store.MaxMutationsPerApply+1)
	for i := range tooMany {
		tooMany[i] = put(Service("default", fmt.Sprintf("s%d", i), 0))
	}
	tests := []struct {
		name    string
		muts    []store.Mutation
		wantMsg string // the error must name what is wrong
	}{
		{"nil object", []store.Mutation{{Op: store.OpPut}}, "mutation[0]: object is nil"},
		{"empty name", []store.Mutation{put(noName)}, "Service/default/: metadata.name"},
		{"unknown kind", []store.Mutation{put(badKind)}, `Gadget/default/a: kind: unknown kind "Gadget"`},
		{"missing namespace", []store.Mutation{put(noNS)}, "Service/a: metadata.namespace"},
		{"namespace on cluster kind", []store.Mutation{put(nsOnClusterKind)}, "MeshConfig/default/mesh: metadata.namespace"},
		{"wrong spec type", []store.Mutation{put(wrongSpec)}, "Service/default/a: spec: must be a non-nil *resource.ServiceSpec"},
		{"nil spec", []store.Mutation{put(nilSpec)}, "Service/default/a: spec"},
		{"bad op", []store.Mutation{{Op: "PATCH", Object: Service("default", "a", 0)}}, `Service/default/a: op "PATCH"`},
		{"duplicate key", []store.Mutation{put(Service("default", "a", 0)), put(Service("default", "a", 1))}, "Service/default/a: appears more than once"},
		{"object too large", []store.Mutation{put(huge)}, "Service/default/huge: encoded object is "},
		{"too many mutations", tooMany, fmt.Sprintf("apply has %d mutations, limit is %d", len(tooMany), store.MaxMutationsPerApply)},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			s := fresh(t)
			_, err := s.Apply(context.Background(), tc.muts)
			wantErrIs(t, "Apply", err, store.ErrInvalid)
			if !strings.Contains(err.Error(), tc.wantMsg) {
				t.Fatalf("error %q does not contain %q", err, tc.wantMsg)
			}
			if r := mustRevision(t, s); r != 0 {
				t.Fatalf("revision %d after invalid apply, want 0", r)
			}
		})
	}
	t.Run("exactly the limit is accepted", func(t *testing.T) {
		s := fresh(t)
		res := mustApply(t, s, tooMany[:store.MaxMutationsPerApply]...)
		if len(res.Objects) != store.MaxMutationsPerApply || res.Revision != 1 {
			t.Fatalf("apply at the limit: %d objects revision %d", len(res.Objects), res.Revision)
		}
	})
}

func testHistory(t *testing.T, s store.Store) {
	a := Service("default", "a", 0)
	_, err := s.History(context.Background(), key(a))
	wantErrIs(t, "History of unknown object", err, store.ErrNotFound)
	prev := []store.Event{}
	for i := range int32(5) {
		mustApply(t, s, put(Service("default", "a", i)), put(Service("default", "other", i)))
		h := mustHistory(t, s, key(a))
		if len(h) != int(i)+1 {
			t.Fatalf("after %d applies: %d history entries", i+1, len(h))
		}
		diff(t, "history is append-only", prev, h[:len(prev)])
		last := h[len(h)-1]
		if last.Op != store.OpPut || last.Revision != store.Revision(i+1) || last.Object.Metadata.Generation != int64(i+1) {
			t.Fatalf("entry %d: op %s revision %d generation %d", i, last.Op, last.Revision, last.Object.Metadata.Generation)
		}
		diff(t, "latest history entry vs Get", mustGet(t, s, key(a)), last.Object)
		prev = h
	}
}

// revisions applies n single-object revisions (names a0..) and returns the events
// expected for them, read back through History.
func revisions(t *testing.T, s store.Store, n int) []store.Event {
	t.Helper()
	var out []store.Event
	for i := range n {
		res := mustApply(t, s, put(Service("default", fmt.Sprintf("a%d", i), 0)))
		h := mustHistory(t, s, key(res.Objects[0]))
		out = append(out, h[len(h)-1])
	}
	return out
}

func testWatchCatchUp(t *testing.T, s store.Store) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	evs := revisions(t, s, 5)
	w := mustWatch(t, ctx, s, 2)
	diff(t, "catch-up events", evs[2:], collect(t, w, 3))
	live := revisions(t, s, 6)[5]
	diff(t, "live event", []store.Event{live}, collect(t, w, 1))
	w0 := mustWatch(t, ctx, s, 0)
	got := collect(t, w0, 6)
	diff(t, "watch from 0", append(evs, live), got)
	wFuture := mustWatch(t, ctx, s, 6)
	res := mustApply(t, s, del(key(evs[0].Object)))
	ev := collect(t, wFuture, 1)[0]
	if ev.Op != store.OpDelete || ev.Revision != res.Revision || ev.Object.Metadata.Revision != int64(res.Revision) {
		t.Fatalf("delete event: op %s revision %d object revision %d, want DELETE %d", ev.Op, ev.Revision, ev.Object.Metadata.Revision, res.Revision)
	}
}

func testWatchConcurrent(t *testing.T, s store.Store) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	const initial, appliers, perApplier = 10, 4, 10
	revisions(t, s, initial)
	var mu sync.Mutex
	sizes := map[store.Revision]int{} // events per revision, from Apply results
	for r := store.Revision(1); r <= initial; r++ {
		sizes[r] = 1
	}
	var wg sync.WaitGroup
	errs := make(chan error, appliers)
	start := make(chan struct{})
	for g := range appliers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-start
			for i := range perApplier {
				n := 1 + i%3
				muts := make([]store.Mutation, n)
				for j := range muts {
					muts[j] = put(Service(fmt.Sprintf("ns%d", g), fmt.Sprintf("s%d-%d", i, j), int32(i)))
				}
				res, err := s.Apply(ctx, muts)
				if err != nil {
					errs <- err
					return
				}
				mu.Lock()
				sizes[res.Revision] = n
				mu.Unlock()
			}
		}()
	}
	close(start)
	const from = 3
	w := mustWatch(t, ctx, s, from) // started at an old revision while appliers run
	var (
		gotMu sync.Mutex
		got   []store.Event
	)
	collected := make(chan struct{})
	go func() { // a prompt reader, so the watch buffer is not what is tested here
		defer close(collected)
		for ev := range w.Events() {
			gotMu.Lock()
			got = append(got, ev)
			gotMu.Unlock()
		}
	}()
	received := func(n int) []store.Event {
		t.Helper()
		var c []store.Event
		testkit.Wait(t, waitTimeout, func() error {
			gotMu.Lock()
			c = append([]store.Event(nil), got...)
			gotMu.Unlock()
			if len(c) < n {
				return fmt.Errorf("received %d of %d events (watch err %v)", len(c), n, w.Err())
			}
			return nil
		})
		return c
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatalf("concurrent Apply: %v", err)
	}
	final := mustRevision(t, s)
	if final != initial+appliers*perApplier {
		t.Fatalf("final revision %d, want %d", final, initial+appliers*perApplier)
	}
	total := 0
	for r := store.Revision(from + 1); r <= final; r++ {
		total += sizes[r]
	}
	evs := received(total)
	next, inRev := store.Revision(from+1), 0
	for _, ev := range evs[:total] {
		if ev.Revision != next {
			if inRev != sizes[next] || ev.Revision != next+1 {
				t.Fatalf("event at revision %d after %d events of revision %d (want %d): gap or repeat", ev.Revision, inRev, next, sizes[next])
			}
			next, inRev = ev.Revision, 0
		}
		inRev++
	}
	if next != final || inRev != sizes[final] {
		t.Fatalf("watch reached revision %d with %d events, want %d with %d", next, inRev, final, sizes[final])
	}
	live := mustApply(t, s, put(Service("default", "live", 0)))
	if ev := received(total + 1)[total]; ev.Revision != live.Revision {
		t.Fatalf("live event revision %d, want %d", ev.Revision, live.Revision)
	}
	cancel()
	select {
	case <-collected:
	case <-time.After(waitTimeout):
		t.Fatal("watch channel not closed after cancel")
	}
	if len(got) != total+1 {
		t.Fatalf("%d events in all, want exactly %d", len(got), total+1)
	}
	if err := w.Err(); err != nil {
		t.Fatalf("Err after cancel: %v, want nil", err)
	}
}

func testWatchCancel(t *testing.T, s store.Store) {
	ctx, cancel := context.WithCancel(context.Background())
	w := mustWatch(t, ctx, s, 0)
	revisions(t, s, 2) // not read: cancel must still close the channel
	cancel()
	drainUntilClosed(t, w)
	if err := w.Err(); err != nil {
		t.Fatalf("Err after cancel: %v, want nil", err)
	}
	mustApply(t, s, put(Service("default", "after-cancel", 0))) // no watcher left to block
}

func testWatchCompacted(t *testing.T, s store.Store) {
	c, ok := s.(store.Compactor)
	if !ok {
		t.Fatalf("%T does not implement store.Compactor", s)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	a := Service("default", "a", 0)
	for i := range int32(5) {
		mustApply(t, s, put(Service("default", "a", i)))
	}
	if err := c.Compact(ctx, 4); err != nil {
		t.Fatalf("Compact(4): %v", err)
	}
	_, err := s.Watch(ctx, 2)
	wantErrIs(t, "Watch(2) after Compact(4)", err, store.ErrCompacted)
	w := mustWatch(t, ctx, s, 3)
	got := collect(t, w, 2)
	if got[0].Revision != 4 || got[1].Revision != 5 {
		t.Fatalf("watch from 3 after compaction: revisions %d %d, want 4 5", got[0].Revision, got[1].Revision)
	}
	h := mustHistory(t, s, key(a))
	diff(t, "history after compaction", got, h)
	if err := c.Compact(ctx, 7); !errors.Is(err, store.ErrInvalid) {
		t.Fatalf("Compact beyond revision+1: %v, want ErrInvalid", err)
	}
}

func testSlowWatcher(t *testing.T, s store.Store) {
	wb, ok := s.(store.WatchBufferer)
	if !ok {
		t.Fatalf("%T does not implement store.WatchBufferer", s)
	}
	limit := wb.WatchBuffer()
	if limit < 1 || limit > MaxSuiteWatchBuffer {
		t.Fatalf("watch buffer %d: open must configure 1..%d for the suite", limit, MaxSuiteWatchBuffer)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	w := mustWatch(t, ctx, s, 0)
	apply := func(n int) {
		t.Helper()
		for range n {
			actx, acancel := context.WithTimeout(ctx, waitTimeout)
			_, err := s.Apply(actx, []store.Mutation{put(Service("default", fmt.Sprintf("s%d", mustRevision(t, s)), 0))})
			acancel()
			if err != nil {
				t.Fatalf("Apply with an unread watcher: %v", err)
			}
		}
	}
	// Exactly the buffer's worth of unread revisions is within the limit.
	apply(limit)
	first := collect(t, w, limit)
	if first[limit-1].Revision != store.Revision(limit) {
		t.Fatalf("last buffered event has revision %d, want %d", first[limit-1].Revision, limit)
	}
	// Nobody reads now: appliers must neither block nor fail, the watcher is cut.
	apply(limit + 5)
	got := drainUntilClosed(t, w)
	for i, ev := range got {
		if ev.Revision != store.Revision(limit+i+1) {
			t.Fatalf("event %d has revision %d: events before the cut must be gap-free", i, ev.Revision)
		}
	}
	if len(got) >= limit+5 {
		t.Fatalf("received all %d events; the watcher should have been cut off", len(got))
	}
	wantErrIs(t, "Err of an overflowed watcher", w.Err(), store.ErrWatchOverflow)
}

func testClose(t *testing.T, s store.Store) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	a := Service("default", "a", 0)
	mustApply(t, s, put(a))
	w := mustWatch(t, ctx, s, 1)
	if err := s.Close(); err != nil {
		t.Fatalf("Close: %v", err)
	}
	drainUntilClosed(t, w)
	wantErrIs(t, "watcher Err after Close", w.Err(), store.ErrClosed)
	calls := map[string]func() error{
		"Get":      func() error { _, err := s.Get(ctx, key(a)); return err },
		"List":     func() error { _, _, err := s.List(ctx, "", ""); return err },
		"Apply":    func() error { _, err := s.Apply(ctx, []store.Mutation{put(a)}); return err },
		"Revision": func() error { _, err := s.Revision(ctx); return err },
		"History":  func() error { _, err := s.History(ctx, key(a)); return err },
		"Watch":    func() error { _, err := s.Watch(ctx, 0); return err },
		"Close":    s.Close,
	}
	for name, call := range calls {
		wantErrIs(t, name+" after Close", call(), store.ErrClosed)
	}
}

func testConcurrency(t *testing.T, s store.Store) {
	ctx := context.Background()
	const workers, perWorker = 8, 10
	var wg sync.WaitGroup
	errs := make(chan error, workers*2)
	for g := range workers {
		wg.Add(2)
		go func() { // writer: create then update its own objects
			defer wg.Done()
			for i := range perWorker {
				o := Service("default", fmt.Sprintf("w%d-%d", g, i%5), int32(i))
				if _, err := s.Apply(ctx, []store.Mutation{put(o)}); err != nil {
					errs <- err
					return
				}
			}
		}()
		go func() { // reader
			defer wg.Done()
			for range perWorker {
				objs, rev, err := s.List(ctx, resource.KindService, "")
				if err != nil {
					errs <- err
					return
				}
				for _, o := range objs {
					if o.Metadata.Revision > int64(rev) {
						errs <- fmt.Errorf("%s has revision %d after list revision %d", o, o.Metadata.Revision, rev)
						return
					}
				}
				if _, err := s.Get(ctx, resource.Key{Kind: resource.KindService, Namespace: "default", Name: fmt.Sprintf("w%d-0", g)}); err != nil && !errors.Is(err, store.ErrNotFound) {
					errs <- err
					return
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	if r := mustRevision(t, s); r != workers*perWorker {
		t.Fatalf("revision %d, want %d (every apply changed something)", r, workers*perWorker)
	}
	objs, _, err := s.List(ctx, "", "")
	if err != nil || len(objs) != workers*5 {
		t.Fatalf("List: %d objects, error %v; want %d", len(objs), err, workers*5)
	}
	for _, o := range objs {
		if o.Metadata.Generation != 2 {
			t.Fatalf("%s: generation %d, want 2", o, o.Metadata.Generation)
		}
	}
}

func testConcurrentIfMatch(t *testing.T, s store.Store) {
	ctx := context.Background()
	a := Service("default", "a", 0)
	mustApply(t, s, put(a))
	const racers = 8
	var wg sync.WaitGroup
	var mu sync.Mutex
	wins, conflicts := 0, 0
	var other []error
	for i := range racers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			// Every racer read generation 1; exactly one may move it.
			_, err := s.Apply(ctx, []store.Mutation{putIf(Service("default", "a", int32(i+1)), 1)})
			mu.Lock()
			defer mu.Unlock()
			switch {
			case err == nil:
				wins++
			case errors.Is(err, store.ErrConflict):
				conflicts++
			default:
				other = append(other, err)
			}
		}()
	}
	wg.Wait()
	if wins != 1 || conflicts != racers-1 || len(other) != 0 {
		t.Fatalf("wins %d conflicts %d other %v; want 1 %d none", wins, conflicts, other, racers-1)
	}
	if g := mustGet(t, s, key(a)).Metadata.Generation; g != 2 {
		t.Fatalf("generation %d, want 2", g)
	}
}

func testContextCanceled(t *testing.T, s store.Store) {
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	_, err := s.Apply(ctx, []store.Mutation{put(Service("default", "a", 0))})
	wantErrIs(t, "Apply with canceled ctx", err, context.Canceled)
	_, err = s.Watch(ctx, 0)
	wantErrIs(t, "Watch with canceled ctx", err, context.Canceled)
	if r := mustRevision(t, s); r != 0 {
		t.Fatalf("revision %d after canceled apply, want 0", r)
	}
}

// RunPersistent checks that everything survives Close and a re-open of the same
// directory: objects, revision, history (with its deletes), compaction.
func RunPersistent(t *testing.T, open func(t *testing.T, dir string) store.Store) {
	ctx := context.Background()
	dir := t.TempDir()
	s := open(t, dir)
	a, b := Service("default", "a", 0), Service("default", "b", 0)
	mustApply(t, s, put(a), put(b), put(meshConfig()))
	mustApply(t, s, put(withStatus(Service("default", "a", 1), "240.240.0.1")))
	mustApply(t, s, del(key(b)))
	objs, rev, err := s.List(ctx, "", "")
	if err != nil {
		t.Fatalf("List: %v", err)
	}
	histA, histB := mustHistory(t, s, key(a)), mustHistory(t, s, key(b))
	w := mustWatch(t, ctx, s, 0)
	all := collect(t, w, 5)
	if err := s.Close(); err != nil {
		t.Fatalf("Close: %v", err)
	}
	drainUntilClosed(t, w)

	s = open(t, dir)
	closeStore(t, s)
	objs2, rev2, err := s.List(ctx, "", "")
	if err != nil {
		t.Fatalf("List after reopen: %v", err)
	}
	if rev2 != rev {
		t.Fatalf("revision %d after reopen, want %d", rev2, rev)
	}
	diff(t, "objects after reopen", objs, objs2)
	diff(t, "history of a after reopen", histA, mustHistory(t, s, key(a)))
	diff(t, "history of b after reopen", histB, mustHistory(t, s, key(b)))
	wctx, cancel := context.WithCancel(ctx)
	defer cancel()
	w = mustWatch(t, wctx, s, 0)
	diff(t, "watch from 0 after reopen", all, collect(t, w, 5))
	res := mustApply(t, s, put(b))
	if res.Revision != rev+1 || res.Objects[0].Metadata.Generation != 1 {
		t.Fatalf("re-create after reopen: revision %d generation %d, want %d 1", res.Revision, res.Objects[0].Metadata.Generation, rev+1)
	}
	if h := mustHistory(t, s, key(b)); len(h) != len(histB)+1 {
		t.Fatalf("history of b: %d entries, want %d", len(h), len(histB)+1)
	}
	if err := s.(store.Compactor).Compact(ctx, 3); err != nil {
		t.Fatalf("Compact: %v", err)
	}
	cancel()
	drainUntilClosed(t, w)
	if err := s.Close(); err != nil {
		t.Fatalf("Close: %v", err)
	}
	s = open(t, dir)
	closeStore(t, s)
	_, err = s.Watch(ctx, 1)
	wantErrIs(t, "Watch(1) after Compact(3) and reopen", err, store.ErrCompacted)
	if h := mustHistory(t, s, key(b)); len(h) != 2 || h[0].Revision != 3 || h[0].Op != store.OpDelete {
		t.Fatalf("history of b after Compact(3): %d entries from revision %d, want 2 from the delete at 3", len(h), h[0].Revision)
	}
	_, err = s.History(ctx, key(a))
	wantErrIs(t, "History of a with all its entries compacted", err, store.ErrNotFound)
	if r := mustRevision(t, s); r != rev+1 {
		t.Fatalf("revision %d after second reopen, want %d", r, rev+1)
	}
}

// testApplyAt: ApplyAt commits only while the store revision is the head it
// names; a stale head is a *RevisionConflictError (errors.Is ErrConflict) and
// writes nothing, and per-object If-Match still holds under it.
func testApplyAt(t *testing.T, s store.Store) {
	ra, ok := s.(store.RevisionApplier)
	if !ok {
		t.Skip("backend does not implement store.RevisionApplier")
	}
	ctx := context.Background()
	r0 := mustApply(t, s, put(Service("default", "a", 0))).Revision
	res, err := ra.ApplyAt(ctx, r0, []store.Mutation{put(Service("default", "b", 0))})
	if err != nil || res.Revision != r0+1 || !res.Changed {
		t.Fatalf("ApplyAt(head %d): %+v, %v; want revision %d", r0, res, err, r0+1)
	}
	_, err = ra.ApplyAt(ctx, r0, []store.Mutation{put(Service("default", "c", 0))})
	var rc *store.RevisionConflictError
	if !errors.As(err, &rc) || !errors.Is(err, store.ErrConflict) || rc.Expected != r0 || rc.Actual != r0+1 {
		t.Fatalf("ApplyAt(stale head %d): err = %v, want a RevisionConflictError %d -> %d", r0, err, r0, r0+1)
	}
	if r := mustRevision(t, s); r != r0+1 {
		t.Fatalf("revision %d after a refused ApplyAt, want %d", r, r0+1)
	}
	if _, err := s.Get(ctx, key(Service("default", "c", 0))); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("refused ApplyAt wrote c: %v", err)
	}
	_, err = ra.ApplyAt(ctx, r0+1, []store.Mutation{putIf(Service("default", "b", 1), 7)})
	wantErrIs(t, "ApplyAt at head with a wrong If-Match", err, store.ErrConflict)
	if errors.As(err, &rc) {
		t.Fatalf("wrong If-Match reported as a revision conflict: %v", err)
	}
}
