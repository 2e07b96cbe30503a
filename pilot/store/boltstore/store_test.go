package boltstore

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	bolt "go.etcd.io/bbolt"
	"go.uber.org/goleak"

	"github.com/weft-mesh/weft/pilot/store"
	"github.com/weft-mesh/weft/pilot/store/storetest"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// suiteBuffer is small so the contract can overflow it with few revisions.
const suiteBuffer = 32

func openT(t *testing.T, dir string, opts ...Option) *Store {
	t.Helper()
	s, err := Open(dir, append([]Option{WithWatchBuffer(suiteBuffer)}, opts...)...)
	if err != nil {
		t.Fatalf("Open: %v", err)
	}
	return s
}

// openTemp opens a store in a temporary directory, closed when the test ends.
func openTemp(t *testing.T) *Store {
	t.Helper()
	s := openT(t, t.TempDir())
	t.Cleanup(func() {
		if err := s.Close(); err != nil {
			t.Errorf("Close: %v", err)
		}
	})
	return s
}

func TestContract(t *testing.T) {
	storetest.Run(t, func(t *testing.T) store.Store { return openT(t, t.TempDir()) })
}

func TestPersistent(t *testing.T) {
	storetest.RunPersistent(t, func(t *testing.T, dir string) store.Store { return openT(t, dir) })
}

func TestOpenOptions(t *testing.T) {
	tests := []struct {
		name string
		opt  Option
		want string
	}{
		{"zero lock timeout", WithLockTimeout(0), "boltstore: lock timeout must be > 0, got 0s"},
		{"zero watch buffer", WithWatchBuffer(0), "boltstore: watch buffer must be >= 1, got 0"},
		{"nil logger", WithLogger(nil), "boltstore: logger must not be nil"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			_, err := Open(t.TempDir(), tc.opt)
			if err == nil || err.Error() != tc.want {
				t.Fatalf("Open: error %v, want %q", err, tc.want)
			}
		})
	}
}

// TestSecondOpenFailsOnLock: two pilots on one data directory must not both run.
func TestSecondOpenFailsOnLock(t *testing.T) {
	dir := t.TempDir()
	s := openT(t, dir)
	defer func() {
		if err := s.Close(); err != nil {
			t.Errorf("Close: %v", err)
		}
	}()
	const timeout = 100 * time.Millisecond
	start := time.Now()
	_, err := Open(dir, WithLockTimeout(timeout))
	if err == nil {
		t.Fatal("second Open on a locked directory succeeded")
	}
	if !strings.Contains(err.Error(), "locked by another process (waited 100ms)") {
		t.Fatalf("error %q does not say the file is locked", err)
	}
	if el := time.Since(start); el < timeout/2 || el > timeout+5*time.Second { // bbolt gives up one 50ms retry early
		t.Fatalf("second Open returned after %s, want about %s", el, timeout)
	}
}

func TestOpenRejectsCorruptObject(t *testing.T) {
	dir := t.TempDir()
	s := openT(t, dir)
	if _, err := s.Apply(context.Background(), []store.Mutation{{Op: store.OpPut, Object: storetest.Service("default", "a", 0)}}); err != nil {
		t.Fatalf("Apply: %v", err)
	}
	// Corrupt the stored spec behind the store's back.
	if err := s.db.Update(func(tx *bolt.Tx) error {
		return tx.Bucket(bucketObjects).Put([]byte("Service\x00default\x00a"), []byte(`{"kind":"Service","metadata":{"name":"a","namespace":"default"},"spec":{"ports":"x"}}`))
	}); err != nil {
		t.Fatalf("corrupt: %v", err)
	}
	if err := s.Close(); err != nil {
		t.Fatalf("Close: %v", err)
	}
	_, err := Open(dir)
	if err == nil || !strings.Contains(err.Error(), "decode object Service/default/a: spec:") {
		t.Fatalf("Open of a corrupt store: %v, want a decode error naming the object", err)
	}
}

func TestOpenCreatesDataDir(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "a", "b")
	s := openT(t, dir)
	if err := s.Close(); err != nil {
		t.Fatalf("Close: %v", err)
	}
	if _, err := os.Stat(filepath.Join(dir, FileName)); err != nil {
		t.Fatalf("store file: %v", err)
	}
	if err := s.Close(); !errors.Is(err, store.ErrClosed) {
		t.Fatalf("second Close: %v, want ErrClosed", err)
	}
}

// TestWatchCatchUpInChunks crosses catch-up read boundaries, including multi-event
// revisions, and checks the sequence against the applies.
func TestWatchCatchUpInChunks(t *testing.T) {
	s := openTemp(t)
	s.cfg.catchUp = 3 // set before any watcher exists
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	type ev struct {
		Rev store.Revision
		Key string
	}
	var want []ev
	for i := range 10 {
		var muts []store.Mutation
		for j := range 1 + i%3 {
			muts = append(muts, store.Mutation{Op: store.OpPut, Object: storetest.Service("default", fmt.Sprintf("s%d", j), int32(i))})
		}
		res, err := s.Apply(ctx, muts)
		if err != nil {
			t.Fatalf("Apply: %v", err)
		}
		if i == 0 {
			continue // the watch starts after revision 1
		}
		for _, o := range res.Objects {
			want = append(want, ev{res.Revision, o.String()})
		}
	}
	w, err := s.Watch(ctx, 1)
	if err != nil {
		t.Fatalf("Watch: %v", err)
	}
	var got []ev
	deadline := time.After(10 * time.Second)
	for len(got) < len(want) {
		select {
		case e, ok := <-w.Events():
			if !ok {
				t.Fatalf("watch closed: %v", w.Err())
			}
			got = append(got, ev{e.Revision, e.Object.String()})
		case <-deadline:
			t.Fatalf("got %d of %d events", len(got), len(want))
		}
	}
	if d := cmp.Diff(want, got); d != "" {
		t.Fatalf("catch-up events (-want +got):\n%s", d)
	}
}

// TestCompactDuringCatchUp: history compacted while a watcher is still reading it
// ends the watch with ErrCompacted instead of skipping revisions.
func TestCompactDuringCatchUp(t *testing.T) {
	s := openTemp(t)
	s.cfg.catchUp = 1 // set before any watcher exists
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	for i := range 5 {
		if _, err := s.Apply(ctx, []store.Mutation{{Op: store.OpPut, Object: storetest.Service("default", fmt.Sprintf("s%d", i), 0)}}); err != nil {
			t.Fatalf("Apply: %v", err)
		}
	}
	w, err := s.Watch(ctx, 0)
	if err != nil {
		t.Fatalf("Watch: %v", err)
	}
	if err := s.Compact(ctx, 4); err != nil {
		t.Fatalf("Compact: %v", err)
	}
	var got []store.Revision
	deadline := time.After(10 * time.Second)
	for done := false; !done; {
		select {
		case ev, ok := <-w.Events():
			if ok {
				got = append(got, ev.Revision)
			}
			done = !ok
		case <-deadline:
			t.Fatal("watch not closed")
		}
	}
	if len(got) > 1 || (len(got) == 1 && got[0] != 1) {
		t.Fatalf("revisions %v before the compaction was noticed, want at most [1]", got)
	}
	if !errors.Is(w.Err(), store.ErrCompacted) {
		t.Fatalf("Err %v, want ErrCompacted", w.Err())
	}
}

func TestListKindNames(t *testing.T) {
	s := openTemp(t)
	ctx := context.Background()
	if _, err := s.Apply(ctx, []store.Mutation{{Op: store.OpPut, Object: storetest.Service("default", "a", 0)}}); err != nil {
		t.Fatalf("Apply: %v", err)
	}
	for _, kind := range []string{"Service", "services", "service"} {
		objs, _, err := s.List(ctx, kind, "")
		if err != nil || len(objs) != 1 {
			t.Fatalf("List(%q): %d objects, error %v; want 1", kind, len(objs), err)
		}
	}
	_, _, err := s.List(ctx, "gadgets", "")
	if !errors.Is(err, store.ErrInvalid) || err.Error() != `list: invalid: unknown kind "gadgets"` {
		t.Fatalf("List of an unknown kind: %v", err)
	}
}

func TestApplyBytesLimit(t *testing.T) {
	s := openTemp(t)
	one, err := encodeObject(storetest.Service("default", "s0", 0))
	if err != nil {
		t.Fatal(err)
	}
	s.cfg.applyBytes = 3*len(one) + len(one)/2 // room for three objects, not four
	muts := make([]store.Mutation, 4)
	for i := range muts {
		muts[i] = store.Mutation{Op: store.OpPut, Object: storetest.Service("default", fmt.Sprintf("s%d", i), 0)}
	}
	ctx := context.Background()
	_, err = s.Apply(ctx, muts)
	want := fmt.Sprintf("invalid: apply encodes to more than %d bytes (at Service/default/s3)", s.cfg.applyBytes)
	if !errors.Is(err, store.ErrInvalid) || err.Error() != want {
		t.Fatalf("Apply over the byte limit: %v, want %q", err, want)
	}
	if rev, _ := s.Revision(ctx); rev != 0 {
		t.Fatalf("revision %d after rejected apply, want 0", rev)
	}
	if _, err := s.Apply(ctx, muts[:3]); err != nil {
		t.Fatalf("Apply within the byte limit: %v", err)
	}
}

// TestHistoryPage: pages of one object's history, by a seek after a revision,
// bounded by store.MaxHistoryPage (at the bound and one past it).
func TestHistoryPage(t *testing.T) {
	s := openTemp(t)
	ctx := context.Background()
	var revs []store.Revision
	for i := range 7 {
		res, err := s.Apply(ctx, []store.Mutation{{Op: store.OpPut, Object: storetest.Service("shop", "a", int32(80+i))}})
		if err != nil {
			t.Fatal(err)
		}
		revs = append(revs, res.Revision)
		if _, err := s.Apply(ctx, []store.Mutation{{Op: store.OpPut, Object: storetest.Service("shop", "other", int32(80+i))}}); err != nil {
			t.Fatal(err)
		}
	}
	key := storetest.Service("shop", "a", 80).Key()
	var got []store.Revision
	var after store.Revision
	pages := 0
	for {
		evs, more, err := s.HistoryPage(ctx, key, after, 3)
		if err != nil {
			t.Fatal(err)
		}
		pages++
		for _, ev := range evs {
			got = append(got, ev.Revision)
		}
		if !more {
			break
		}
		after = evs[len(evs)-1].Revision
	}
	if diff := cmp.Diff(revs, got); diff != "" || pages != 3 {
		t.Fatalf("paged history (%d pages) differs (-want +got):\n%s", pages, diff)
	}
	if _, _, err := s.HistoryPage(ctx, key, 0, store.MaxHistoryPage); err != nil {
		t.Fatalf("limit at the bound: %v", err)
	}
	for _, n := range []int{0, store.MaxHistoryPage + 1} {
		if _, _, err := s.HistoryPage(ctx, key, 0, n); !errors.Is(err, store.ErrInvalid) {
			t.Fatalf("limit %d: err = %v, want ErrInvalid", n, err)
		}
	}
	if _, _, err := s.HistoryPage(ctx, storetest.Service("shop", "none", 80).Key(), 0, 10); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("no history: err = %v, want ErrNotFound", err)
	}
}

// TestSets: the store.Sets contract (one file, one handle), and a set
// survives a reopen (which verifies the whole file, the set's bucket too).
func TestSets(t *testing.T) {
	storetest.RunSets(t, func(t *testing.T) (store.Sets, store.Sets) {
		s := openTemp(t)
		return s, s
	})
	dir := t.TempDir()
	s := openT(t, dir)
	rev, err := s.SetApply(context.Background(), "keep", []store.SetRecord{{Name: "a", Value: []byte("1")}}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	s = openTemp(t) // a different store: the set is per file
	if recs, r, err := s.SetList(context.Background(), "keep"); err != nil || len(recs) != 0 || r != 0 {
		t.Fatalf("another file: %v %d %v", recs, r, err)
	}
	s2 := openT(t, dir)
	defer s2.Close()
	recs, r, err := s2.SetList(context.Background(), "keep")
	if err != nil || r != rev || len(recs) != 1 || string(recs[0].Value) != "1" {
		t.Fatalf("after reopen: %v at %d (%v), want a=1 at %d", recs, r, err, rev)
	}
}
