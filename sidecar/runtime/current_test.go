package runtime

import (
	"context"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/weft-mesh/weft/certs/manifest"
	"github.com/weft-mesh/weft/sidecar/runtime/lkg"
)

// TestNotCurrentServedNotReady: a configuration pilot sent without confirming
// it current (its wait for the compile of the stream's store revision timed
// out) is activated, since it is what pilot has, but the sidecar is not ready on
// it and does not persist it; the same content confirmed current makes it ready
// and is persisted; a later stream offering that content unconfirmed does not
// take readiness away, but other content unconfirmed does.
func TestNotCurrentServedNotReady(t *testing.T) {
	e := newEnv(t)
	r := e.runtime()
	ctx := context.Background()
	res := mesh("127.0.0.1:9001")
	if err := r.Apply(ctx, e.update(r, res, "v1", e.sign(res, signOpts{revision: 5, notCurrent: true, streamRev: 7}))); err != nil {
		t.Fatal(err)
	}
	if r.Load() == nil {
		t.Fatal("a signed configuration not confirmed current was not activated")
	}
	ok, body := r.Ready()
	want := "configuration not current: pilot sent revision 5 without confirming it current (the store was at revision 7 when the stream opened"
	if ok || !strings.HasPrefix(body, want) {
		t.Fatalf("Ready = %v %q, want not ready: %q...", ok, body, want)
	}
	d := r.Dump()
	if d.Active.Current || d.Active.Manifest.Current || d.Active.Manifest.StreamRevision != 7 {
		t.Fatalf("active = %+v manifest %+v, want not current at stream revision 7", d.Active, d.Active.Manifest)
	}
	e.flush()
	if _, _, err := lkg.Load(e.dir, manifest.Trust{Pin: e.pub}, nodeID, t0); !errors.Is(err, lkg.ErrNoSnapshot) {
		t.Fatalf("a configuration not confirmed current was persisted: %v", err)
	}

	// Pilot's compile lands: the same content, confirmed current.
	if err := r.Apply(ctx, e.update(r, res, "v1", e.sign(res, signOpts{revision: 5, streamRev: 7}))); err != nil {
		t.Fatal(err)
	}
	if ok, body := r.Ready(); !ok || !r.Dump().Active.Current {
		t.Fatalf("Ready after the current manifest = %v %q", ok, body)
	}
	e.flush()
	if _, m, err := lkg.Load(e.dir, manifest.Trust{Pin: e.pub}, nodeID, t0); err != nil || !m.Current {
		t.Fatalf("current configuration not persisted: %v %v", m, err)
	}

	// A reconnect whose wait timed out offering the content already confirmed.
	if err := r.Apply(ctx, e.update(r, res, "v1", e.sign(res, signOpts{revision: 5, notCurrent: true, streamRev: 9}))); err != nil {
		t.Fatal(err)
	}
	if ok, body := r.Ready(); !ok {
		t.Fatalf("same content offered unconfirmed took readiness away: %q", body)
	}
	// Other content, unconfirmed: served, not ready.
	other := mesh("127.0.0.1:9002")
	if err := r.Apply(ctx, e.update(r, other, "v2", e.sign(other, signOpts{revision: 6, notCurrent: true, streamRev: 9}))); err != nil {
		t.Fatal(err)
	}
	if ok, _ := r.Ready(); ok || r.Dump().Active.Revision != 6 {
		t.Fatalf("other content not confirmed current: ready %v at revision %d, want not ready at 6", ok, r.Dump().Active.Revision)
	}
}

// slowDisk is a Save that blocks until released and records what it wrote.
type slowDisk struct {
	entered chan struct{} // one value per write started
	release chan struct{} // closed to let writes finish
	mu      sync.Mutex
	revs    []int64 // manifest revision of each snapshot written, in order
	pub     func(*lkg.Snapshot) int64
}

func (d *slowDisk) save(dir string, s *lkg.Snapshot) error {
	d.entered <- struct{}{}
	<-d.release
	d.mu.Lock()
	d.revs = append(d.revs, d.pub(s))
	d.mu.Unlock()
	return lkg.Save(dir, s)
}

// TestSlowDiskDoesNotBlockActivation: while the last-known-good write is stuck
// on a slow disk, Apply (the xDS stream's call) still activates each new
// configuration at once; the writer then writes only the newest, never an older
// one after it, and Flush (shutdown) waits until it is on disk.
func TestSlowDiskDoesNotBlockActivation(t *testing.T) {
	e := newEnv(t)
	disk := &slowDisk{entered: make(chan struct{}, 8), release: make(chan struct{}), pub: func(s *lkg.Snapshot) int64 {
		m, err := manifest.Verify(e.pub, s.Manifest, nodeID, e.clock.Now())
		if err != nil {
			t.Errorf("writer got an unverifiable manifest: %v", err)
			return -1
		}
		return m.Revision
	}}
	r := e.runtime(func(c *Config) { c.Save = disk.save })
	var once sync.Once
	release := func() { once.Do(func() { close(disk.release) }) }
	defer release() // unblocks the writer if the test fails early
	apply := func(rev int64, backend string) {
		t.Helper()
		res := mesh(backend)
		done := make(chan error, 1)
		go func() {
			done <- r.Apply(context.Background(), e.update(r, res, "v", e.sign(res, signOpts{revision: rev})))
		}()
		select {
		case err := <-done:
			if err != nil {
				t.Fatal(err)
			}
		case <-time.After(5 * time.Second):
			t.Fatalf("Apply of revision %d waited for the disk", rev)
		}
		if got := r.Dump().Active.Revision; got != rev {
			t.Fatalf("active revision %d, want %d", got, rev)
		}
	}
	apply(1, "127.0.0.1:9001")
	select {
	case <-disk.entered: // the write of revision 1 is stuck on the disk now
	case <-time.After(5 * time.Second):
		t.Fatal("revision 1 was never written")
	}
	apply(2, "127.0.0.1:9002")
	apply(3, "127.0.0.1:9003")
	if ok, body := r.Ready(); !ok {
		t.Fatalf("not ready while the disk is slow: %q", body)
	}
	if d := r.Dump(); !d.LastKnownGood.SavedAt.IsZero() {
		t.Fatalf("SavedAt %v before any write finished", d.LastKnownGood.SavedAt)
	}
	release()
	r.Flush()
	disk.mu.Lock()
	revs := append([]int64(nil), disk.revs...)
	disk.mu.Unlock()
	if len(revs) != 2 || revs[0] != 1 || revs[1] != 3 {
		t.Fatalf("written revisions %v, want [1 3]: the newest wins, nothing older after it", revs)
	}
	if _, m, err := lkg.Load(e.dir, manifest.Trust{Pin: e.pub}, nodeID, t0); err != nil || m.Revision != 3 {
		t.Fatalf("file after Flush: %v %v, want revision 3", m, err)
	}
	if d := r.Dump(); d.LastKnownGood.SavedAt.IsZero() || d.LastKnownGood.LastError != "" {
		t.Fatalf("lkg info after Flush = %+v", d.LastKnownGood)
	}
}

// TestSaverNeverWritesOlder: a save offered after a newer one (two callers
// racing out of the lock) is dropped.
func TestSaverNeverWritesOlder(t *testing.T) {
	e := newEnv(t)
	var mu sync.Mutex
	var wrote []time.Time
	r := e.runtime(func(c *Config) {
		c.Save = func(_ string, s *lkg.Snapshot) error {
			mu.Lock()
			wrote = append(wrote, s.LastConfirmed)
			mu.Unlock()
			return nil
		}
	})
	snap := func(sec int) *pendingSave {
		return &pendingSave{seq: uint64(sec), at: t0, snap: &lkg.Snapshot{LastConfirmed: t0.Add(time.Duration(sec) * time.Second)}}
	}
	r.saver.offer(snap(2))
	r.saver.offer(snap(1)) // older: dropped
	r.Flush()
	r.saver.offer(snap(2)) // the same again: dropped
	r.saver.offer(snap(3))
	r.Flush()
	mu.Lock()
	defer mu.Unlock()
	if len(wrote) != 2 || !wrote[0].Equal(t0.Add(2*time.Second)) || !wrote[1].Equal(t0.Add(3*time.Second)) {
		t.Fatalf("wrote %v, want the snapshots of seq 2 then 3", wrote)
	}
}
