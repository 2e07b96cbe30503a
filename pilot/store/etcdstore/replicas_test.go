package etcdstore

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/weft-mesh/weft/pilot/resource"
	"github.com/weft-mesh/weft/pilot/store"
	"github.com/weft-mesh/weft/pilot/store/storetest"
	"github.com/weft-mesh/weft/tools/testkit"
	"github.com/weft-mesh/weft/tools/testkit/etcdtest"
)

// TestReplicas: several Stores on one prefix are replicas of one store: reads
// on one see applies on another at once, watches see every replica's revisions,
// If-Match races across replicas have one winner, compaction by one is seen by
// the others, and a replica opened later loads the snapshot and the log.
func TestReplicas(t *testing.T) {
	t.Parallel()
	c := etcdtest.Start(t, etcdtest.Options{})
	ctx := context.Background()
	open := func(t *testing.T, prefix string) *Store {
		t.Helper()
		s := openT(t, c, prefix)
		t.Cleanup(func() { s.Close() })
		return s
	}
	svc := func(name string, n int32) []store.Mutation {
		return []store.Mutation{{Op: store.OpPut, Object: storetest.Service("default", name, n)}}
	}
	key := resource.Key{Kind: resource.KindService, Namespace: "default", Name: "a"}

	t.Run("identity", func(t *testing.T) {
		prefix := newPrefix(t)
		a, b, other := open(t, prefix), open(t, prefix), open(t, newPrefix(t))
		if a.ID() == "" || a.ID() != b.ID() || a.ID() == other.ID() {
			t.Fatalf("ids: replicas %q %q, another prefix %q: want equal non-empty, and different", a.ID(), b.ID(), other.ID())
		}
	})

	t.Run("read after apply on another replica", func(t *testing.T) {
		prefix := newPrefix(t)
		a, b := open(t, prefix), open(t, prefix)
		for i := range int32(20) {
			res, err := a.Apply(ctx, svc("a", i))
			if err != nil {
				t.Fatal(err)
			}
			got, err := b.Get(ctx, key)
			if err != nil || got.Metadata.Revision != int64(res.Revision) {
				t.Fatalf("apply %d at revision %d on a: b reads %v, %v", i, res.Revision, got, err)
			}
		}
	})

	t.Run("watch sees every replica", func(t *testing.T) {
		prefix := newPrefix(t)
		a, b := open(t, prefix), open(t, prefix)
		wctx, cancel := context.WithCancel(ctx)
		defer cancel()
		w, err := b.Watch(wctx, 0)
		if err != nil {
			t.Fatal(err)
		}
		var wg sync.WaitGroup
		for i, s := range []*Store{a, b} {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for j := range int32(10) {
					if _, err := s.Apply(ctx, svc(fmt.Sprintf("r%d", i), j)); err != nil {
						t.Error(err)
						return
					}
				}
			}()
		}
		wg.Wait()
		for want := store.Revision(1); want <= 20; want++ {
			select {
			case ev := <-w.Events():
				if ev.Revision != want {
					t.Fatalf("event at revision %d, want %d", ev.Revision, want)
				}
			case <-time.After(10 * time.Second):
				t.Fatalf("no event for revision %d (%v)", want, w.Err())
			}
		}
	})

	t.Run("If-Match race across replicas", func(t *testing.T) {
		prefix := newPrefix(t)
		replicas := []*Store{open(t, prefix), open(t, prefix), open(t, prefix)}
		if _, err := replicas[0].Apply(ctx, svc("a", 0)); err != nil {
			t.Fatal(err)
		}
		var mu sync.Mutex
		wins, conflicts := 0, 0
		var wg sync.WaitGroup
		for i := range 9 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				gen := int64(1)
				m := svc("a", int32(i+1))
				m[0].IfMatch = &gen
				_, err := replicas[i%3].Apply(ctx, m)
				mu.Lock()
				defer mu.Unlock()
				switch {
				case err == nil:
					wins++
				case errors.Is(err, store.ErrConflict):
					conflicts++
				default:
					t.Errorf("racer %d: %v", i, err)
				}
			}()
		}
		wg.Wait()
		if wins != 1 || conflicts != 8 {
			t.Fatalf("wins %d conflicts %d, want 1 8", wins, conflicts)
		}
	})

	t.Run("compaction seen by other replicas and by a late one", func(t *testing.T) {
		prefix := newPrefix(t)
		a, b := open(t, prefix), open(t, prefix)
		for i := range int32(6) {
			if _, err := a.Apply(ctx, append(svc("a", i), svc(fmt.Sprintf("x%d", i), 0)...)); err != nil {
				t.Fatal(err)
			}
		}
		if _, err := a.Apply(ctx, []store.Mutation{{Op: store.OpDelete, Object: storetest.Service("default", "x0", 0)}}); err != nil {
			t.Fatal(err)
		}
		if err := a.Compact(ctx, 5); err != nil {
			t.Fatal(err)
		}
		// b learns of it through its log watch: a catch-up from before it fails.
		// b first catches up to the head (Revision reads it linearizably), so
		// the watch has a catch-up to do: a watch from 2 on a replica still at
		// 0 would rightly wait for live revisions instead.
		if _, err := b.Revision(ctx); err != nil {
			t.Fatal(err)
		}
		w, err := b.Watch(ctx, 2)
		if err == nil {
			for range w.Events() {
			}
			err = w.Err()
		}
		if !errors.Is(err, store.ErrCompacted) {
			t.Fatalf("b.Watch(2) after a.Compact(5): %v, want ErrCompacted", err)
		}
		h, err := b.History(ctx, key)
		if err != nil || len(h) != 2 || h[0].Revision != 5 {
			t.Fatalf("b.History after compaction: %d events from %v (%v), want 2 from 5", len(h), h, err)
		}
		late := open(t, prefix)
		want, wrev, err := a.List(ctx, "", "")
		if err != nil {
			t.Fatal(err)
		}
		got, grev, err := late.List(ctx, "", "")
		if err != nil || grev != wrev {
			t.Fatalf("late replica: revision %d (%v), want %d", grev, err, wrev)
		}
		if d := cmp.Diff(want, got); d != "" {
			t.Fatalf("late replica's objects (-a +late):\n%s", d)
		}
		if res, err := late.Apply(ctx, svc("a", 99)); err != nil || res.Revision != wrev+1 || res.Objects[0].Metadata.Generation != 7 {
			t.Fatalf("apply on the late replica: %+v %v", res, err)
		}
	})

	t.Run("history pages", func(t *testing.T) {
		s := open(t, newPrefix(t))
		for i := range int32(7) {
			if _, err := s.Apply(ctx, append(svc("a", i), svc("b", i)...)); err != nil {
				t.Fatal(err)
			}
		}
		var revs []store.Revision
		after := store.Revision(0)
		for {
			evs, more, err := s.HistoryPage(ctx, key, after, 3)
			if err != nil {
				t.Fatal(err)
			}
			for _, ev := range evs {
				revs = append(revs, ev.Revision)
			}
			if !more {
				break
			}
			after = evs[len(evs)-1].Revision
		}
		if d := cmp.Diff([]store.Revision{1, 2, 3, 4, 5, 6, 7}, revs); d != "" {
			t.Fatalf("paged history revisions (-want +got):\n%s", d)
		}
		if _, _, err := s.HistoryPage(ctx, key, 0, store.MaxHistoryPage); err != nil {
			t.Fatalf("page at the bound: %v", err)
		}
		if _, _, err := s.HistoryPage(ctx, key, 0, store.MaxHistoryPage+1); !errors.Is(err, store.ErrInvalid) {
			t.Fatalf("page one past the bound: %v, want ErrInvalid", err)
		}
	})
}

// TestOpenConfig: every inconsistent Config is refused with a message naming it.
func TestOpenConfig(t *testing.T) {
	t.Parallel()
	ep := []string{"http://127.0.0.1:1"}
	tests := []struct {
		cfg  Config
		want string
	}{
		{Config{}, "etcdstore: no endpoints"},
		{Config{Endpoints: []string{""}}, "etcdstore: empty endpoint"},
		{Config{Endpoints: ep, Prefix: "/weft"}, `etcdstore: prefix "/weft" must end with /`},
		{Config{Endpoints: ep, WatchBuffer: -1}, "etcdstore: watch buffer must be >= 1, got -1"},
		{Config{Endpoints: ep, MaxTxnOps: 3}, "etcdstore: max txn ops must be >= 4 (a chunked commit has 3 + chunks), got 3"},
		{Config{Endpoints: ep, MaxRequestBytes: DefaultInlineBytes + RequestOverhead - 1},
			fmt.Sprintf("etcdstore: inline bytes %d must be in 1..max request bytes %d - %d", DefaultInlineBytes, DefaultInlineBytes+RequestOverhead-1, RequestOverhead)},
		{Config{Endpoints: ep, ChunkLeaseTTL: time.Millisecond}, "etcdstore: chunk lease TTL must be >= 1s, got 1ms"},
		{Config{Endpoints: ep, RequestTimeout: -time.Second}, "etcdstore: timeouts must not be negative"},
	}
	for _, tc := range tests {
		_, err := Open(context.Background(), tc.cfg)
		if err == nil || err.Error() != tc.want {
			t.Errorf("Open(%+v): %v, want %q", tc.cfg, err, tc.want)
		}
	}
	// Nothing listening: Open fails within its dial and request timeouts.
	start := time.Now()
	_, err := Open(context.Background(), Config{Endpoints: ep, DialTimeout: 500 * time.Millisecond, RequestTimeout: 500 * time.Millisecond})
	if err == nil || !strings.Contains(err.Error(), "127.0.0.1:1") {
		t.Fatalf("Open with no etcd: %v", err)
	}
	if d := time.Since(start); d > 10*time.Second {
		t.Fatalf("Open with no etcd took %s", d)
	}
}

// TestTLS: against a cluster that serves TLS and requires client certificates,
// the store connects with TLSConfig(ca, cert, key), and is refused without the
// client certificate or without the CA.
func TestTLS(t *testing.T) {
	t.Parallel()
	c := etcdtest.Start(t, etcdtest.Options{TLS: true})
	ctx := context.Background()
	open := func(ca, cert, key string) (*Store, error) {
		tlsCfg, err := TLSConfig(ca, cert, key)
		if err != nil {
			return nil, err
		}
		return Open(ctx, Config{Endpoints: c.Endpoints, TLS: tlsCfg, Prefix: newPrefix(t), DialTimeout: 2 * time.Second, RequestTimeout: 2 * time.Second})
	}
	s, err := open(c.TLS.CAFile, c.TLS.CertFile, c.TLS.KeyFile)
	if err != nil {
		t.Fatalf("Open over TLS: %v", err)
	}
	defer s.Close()
	if res, err := s.Apply(ctx, []store.Mutation{{Op: store.OpPut, Object: storetest.Service("default", "a", 0)}}); err != nil || res.Revision != 1 {
		t.Fatalf("Apply over TLS: %+v %v", res, err)
	}
	for name, files := range map[string][3]string{
		"no client certificate": {c.TLS.CAFile, "", ""},
		"no CA (system roots)":  {"", c.TLS.CertFile, c.TLS.KeyFile},
	} {
		if s, err := open(files[0], files[1], files[2]); err == nil {
			s.Close()
			t.Errorf("%s: Open succeeded", name)
		}
	}
	if _, err := TLSConfig(c.TLS.CAFile, c.TLS.CertFile, ""); err == nil || err.Error() != "etcd client certificate and key must be given together" {
		t.Errorf("TLSConfig with a certificate and no key: %v", err)
	}
	if _, err := TLSConfig(c.TLS.KeyFile, "", ""); err == nil || !strings.Contains(err.Error(), "no PEM certificate") {
		t.Errorf("TLSConfig with a key as CA: %v", err)
	}
}

// TestAnnounce: replicas announce themselves on leases: listed while alive
// (kept alive past several TTLs), gone at once after a clean Close. A killed
// replica's lease expiring is shown by the two-replica drill.
func TestAnnounce(t *testing.T) {
	t.Parallel()
	c := etcdtest.Start(t, etcdtest.Options{})
	ctx := context.Background()
	prefix := newPrefix(t)
	a, b := openT(t, c, prefix), openT(t, c, prefix)
	defer b.Close()
	if err := a.Announce(ctx, Replica{ID: "a", AdminURL: "http://127.0.0.1:1"}, MinReplicaTTL-time.Millisecond); err == nil {
		t.Fatal("Announce below MinReplicaTTL accepted")
	}
	for _, s := range []*Store{a, b} {
		if err := s.Announce(ctx, Replica{ID: fmt.Sprintf("r%p", s), AdminURL: "http://x"}, MinReplicaTTL); err != nil {
			t.Fatal(err)
		}
	}
	list := func() int {
		rs, err := b.Replicas(ctx)
		if err != nil {
			t.Fatal(err)
		}
		return len(rs)
	}
	if n := list(); n != 2 {
		t.Fatalf("%d replicas announced, want 2", n)
	}
	// Kept alive past several TTLs.
	deadline := time.Now().Add(3 * etcdtest.ElectionTimeout)
	testkit.Eventually(t, 30*time.Second, "three election timeouts pass with both announced", func() bool {
		if list() != 2 {
			t.Fatalf("an announcement expired while its replica ran")
		}
		return time.Now().After(deadline)
	})
	if err := a.Close(); err != nil {
		t.Fatal(err)
	}
	if n := list(); n != 1 {
		t.Fatalf("%d replicas after a clean Close, want 1", n)
	}
}

// TestReplicaBehindCompaction: a replica cut off from etcd (its only member
// killed) while the others apply, compact Weft's history and compact etcd's
// own history past it, reloads from the snapshot when its member returns: its
// watchers are cut with ErrCompacted (they would miss revisions), its state is
// the others', and it applies again.
func TestReplicaBehindCompaction(t *testing.T) {
	t.Parallel()
	c := etcdtest.Start(t, etcdtest.Options{})
	ctx := context.Background()
	prefix := newPrefix(t)
	a := openT(t, c, prefix)
	defer a.Close()
	b := openT(t, c, prefix, func(cfg *Config) { cfg.Endpoints = c.Endpoints[:1] })
	defer b.Close()
	apply := func(s *Store, name string, n int32) {
		t.Helper()
		actx, cancel := context.WithTimeout(ctx, 30*time.Second)
		defer cancel()
		if _, err := s.Apply(actx, []store.Mutation{{Op: store.OpPut, Object: storetest.Service("default", name, n)}}); err != nil {
			t.Fatal(err)
		}
	}
	wctx, cancel := context.WithCancel(ctx)
	defer cancel()
	w, err := b.Watch(wctx, 0)
	if err != nil {
		t.Fatal(err)
	}
	for i := range int32(3) {
		apply(a, "a", i)
	}
	if err := b.waitRev(ctx, 3); err != nil {
		t.Fatal(err)
	}
	// Kill b's member, and make sure it is not the leader the others need.
	m0 := c.Members[0]
	m0.Kill(t)
	c.WaitLeader(t)
	for i := range int32(5) {
		apply(a, fmt.Sprintf("x%d", i), i)
	}
	head, err := a.Revision(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if err := a.Compact(ctx, head+1); err != nil {
		t.Fatal(err)
	}
	cli := c.Client(t)
	resp, err := cli.Get(ctx, "any")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := cli.Compact(ctx, resp.Header.Revision); err != nil { // etcd's own history too
		t.Fatal(err)
	}
	c.Restart(t, m0)
	var evs []store.Event
	testkit.Wait(t, 60*time.Second, func() error {
		select {
		case ev, ok := <-w.Events():
			if !ok {
				return nil
			}
			evs = append(evs, ev)
		default:
		}
		return fmt.Errorf("watcher of b still open after %d events", len(evs))
	})
	if !errors.Is(w.Err(), store.ErrCompacted) {
		t.Fatalf("b's watcher ended with %v, want ErrCompacted", w.Err())
	}
	for i, ev := range evs {
		if ev.Revision != store.Revision(i+1) {
			t.Fatalf("b's watcher: event %d at revision %d: a gap before the cut", i, ev.Revision)
		}
	}
	want, _, err := a.List(ctx, "", "")
	if err != nil {
		t.Fatal(err)
	}
	got, rev, err := b.List(ctx, "", "")
	if err != nil || rev != head {
		t.Fatalf("b after its member returned: revision %d (%v), want %d", rev, err, head)
	}
	if d := cmp.Diff(want, got); d != "" {
		t.Fatalf("b's objects (-a +b):\n%s", d)
	}
	apply(b, "a", 99)
	t.Logf("b's watcher got %d events then was cut: %v; b reloaded at %d", len(evs), w.Err(), head)
}
