package meshcache

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	clusterv3 "github.com/envoyproxy/go-control-plane/envoy/config/cluster/v3"
	"github.com/google/go-cmp/cmp"
	"github.com/hashicorp/go-hclog"
	"go.uber.org/goleak"
	"google.golang.org/protobuf/proto"

	"github.com/weft-mesh/weft/bootstrap/node"
	"github.com/weft-mesh/weft/pilot/compile"
	"github.com/weft-mesh/weft/pilot/ir"
	"github.com/weft-mesh/weft/pilot/resource"
	"github.com/weft-mesh/weft/pilot/store"
	"github.com/weft-mesh/weft/pilot/store/boltstore"
	"github.com/weft-mesh/weft/pilot/xds/snapshot"
	"github.com/weft-mesh/weft/tools/testkit"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// recorder is a Compile/Generate pair that records its calls. The "mesh" it
// compiles carries only the revision; what was compiled is kept per revision.
type recorder struct {
	mu       sync.Mutex
	inputs   []compile.Input
	gens     atomic.Int64
	failNext atomic.Bool
	gate     atomic.Pointer[chan struct{}] // when set, compiles wait for it to close
}

// hold makes compiles wait until the returned func is called.
func (r *recorder) hold() (release func()) {
	ch := make(chan struct{})
	r.gate.Store(&ch)
	var once sync.Once
	return func() { once.Do(func() { r.gate.Store(nil); close(ch) }) }
}

func (r *recorder) compile(in compile.Input) (*ir.Mesh, error) {
	if g := r.gate.Load(); g != nil {
		<-*g
	}
	if r.failNext.Swap(false) {
		return nil, errors.New("bad mesh")
	}
	r.mu.Lock()
	r.inputs = append(r.inputs, in)
	r.mu.Unlock()
	return &ir.Mesh{Revision: in.Revision}, nil
}

func (r *recorder) generate(m *ir.Mesh, n *node.Node) (*snapshot.Snapshot, error) {
	r.gens.Add(1)
	return snapshot.New(m.Revision, map[string]map[string]proto.Message{
		snapshot.ClusterType: {n.Namespace: &clusterv3.Cluster{Name: n.Namespace}},
	})
}

func (r *recorder) last() compile.Input {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.inputs[len(r.inputs)-1]
}

func (r *recorder) count() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return len(r.inputs)
}

type fixture struct {
	st    *boltstore.Store
	cache *Cache
	rec   *recorder
	cfg   Config

	mu       sync.Mutex
	compiled map[int64]time.Time
}

func start(t *testing.T, edit func(*Config)) *fixture {
	t.Helper()
	st, err := boltstore.Open(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	f := &fixture{st: st, rec: &recorder{}, compiled: map[int64]time.Time{}}
	f.cfg = Config{Store: st, Logger: hclog.NewNullLogger(), Debounce: 20 * time.Millisecond, MaxDelay: 200 * time.Millisecond, GenWorkers: 2,
		Compile: f.rec.compile, Generate: f.rec.generate,
		OnCompiled: func(rev int64, at time.Time) { f.mu.Lock(); f.compiled[rev] = at; f.mu.Unlock() }}
	if edit != nil {
		edit(&f.cfg)
	}
	f.cache, err = New(f.cfg)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- f.cache.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Run: %v", err)
		}
		st.Close()
	})
	return f
}

func workload(name, addr string) *resource.Object {
	return &resource.Object{APIVersion: resource.APIVersion, Kind: resource.KindWorkload,
		Metadata: resource.Metadata{Name: name, Namespace: "shop", Labels: map[string]string{"app": "x"}},
		Spec:     &resource.WorkloadSpec{Address: addr, ServiceAccount: "default", Weight: 1}}
}

func (f *fixture) put(t *testing.T, objs ...*resource.Object) int64 {
	t.Helper()
	var muts []store.Mutation
	for _, o := range objs {
		muts = append(muts, store.Mutation{Op: store.OpPut, Object: o})
	}
	res, err := f.st.Apply(context.Background(), muts)
	if err != nil {
		t.Fatal(err)
	}
	return int64(res.Revision)
}

// waitRev waits until p's snapshot is at revision rev or later.
func waitRev(t *testing.T, p *Proxy, rev int64) *snapshot.Snapshot {
	t.Helper()
	deadline := time.After(5 * time.Second)
	for {
		if s := p.Snapshot(); s != nil && s.Revision >= rev {
			return s
		}
		select {
		case <-p.Changed():
		case <-deadline:
			t.Fatalf("proxy %s: no snapshot at revision %d (have %v)", p.Node().ID, rev, p.Snapshot())
		}
	}
}

func TestConfigCheck(t *testing.T) {
	ok := Config{Store: nopStore{}, Logger: hclog.NewNullLogger(), Debounce: time.Millisecond, MaxDelay: time.Second, GenWorkers: 1}
	tests := []struct {
		name string
		edit func(*Config)
		want string
	}{
		{"store", func(c *Config) { c.Store = nil }, "meshcache: Config.Store is required"},
		{"logger", func(c *Config) { c.Logger = nil }, "meshcache: Config.Logger is required"},
		{"debounce", func(c *Config) { c.Debounce = 0 }, "meshcache: Config.Debounce must be > 0, got 0s"},
		{"max delay", func(c *Config) { c.MaxDelay = time.Microsecond }, "meshcache: Config.MaxDelay must be >= Debounce (1ms), got 1µs"},
		{"negative registration debounce", func(c *Config) { c.RegistrationDebounce = -time.Nanosecond }, "meshcache: Config.RegistrationDebounce must be >= 0, got -1ns"},
		{"registration max delay one under its debounce", func(c *Config) {
			c.RegistrationDebounce, c.RegistrationMaxDelay = time.Second, time.Second-time.Nanosecond
		},
			"meshcache: Config.RegistrationMaxDelay must be >= RegistrationDebounce (1s), got 999.999999ms"},
		{"workers", func(c *Config) { c.GenWorkers = 0 }, "meshcache: Config.GenWorkers must be > 0, got 0"},
		{"current wait one past its bound", func(c *Config) { c.CurrentWait = MaxCurrentWait + time.Nanosecond },
			"meshcache: Config.CurrentWait must be in [0, 1m0s], got 1m0.000000001s"},
		{"negative current wait", func(c *Config) { c.CurrentWait = -time.Nanosecond }, "meshcache: Config.CurrentWait must be in [0, 1m0s], got -1ns"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			c := ok
			tc.edit(&c)
			if _, err := New(c); err == nil || err.Error() != tc.want {
				t.Fatalf("err = %v, want %q", err, tc.want)
			}
		})
	}
	c, err := New(ok)
	if err != nil {
		t.Fatal(err)
	}
	if c.cfg.CurrentWait != DefaultCurrentWait {
		t.Fatalf("CurrentWait 0 became %v, want DefaultCurrentWait", c.cfg.CurrentWait)
	}
	atBound := ok
	atBound.CurrentWait = MaxCurrentWait
	if _, err := New(atBound); err != nil {
		t.Fatalf("CurrentWait at its bound: %v", err)
	}
	if c.cfg.RegistrationDebounce != ok.Debounce || c.cfg.RegistrationMaxDelay != ok.MaxDelay {
		t.Fatalf("registration windows 0 became %v/%v, want Debounce/MaxDelay", c.cfg.RegistrationDebounce, c.cfg.RegistrationMaxDelay)
	}
	regBound := ok
	regBound.RegistrationDebounce, regBound.RegistrationMaxDelay = time.Second, time.Second
	if _, err := New(regBound); err != nil {
		t.Fatalf("RegistrationMaxDelay at its bound (= RegistrationDebounce): %v", err)
	}
	if _, err := c.Connect(&node.Node{}); err == nil || err.Error() != "meshcache: connect: node id is required" {
		t.Fatalf("connect without id: %v", err)
	}
}

type nopStore struct{ store.Store }

func TestSharedScopeAndUpdates(t *testing.T) {
	f := start(t, nil)
	var ps []*Proxy
	for i := range 20 {
		p, err := f.cache.Connect(&node.Node{ID: fmt.Sprintf("p%d", i), Namespace: []string{"a", "b"}[i%2]})
		if err != nil {
			t.Fatal(err)
		}
		defer p.Close()
		ps = append(ps, p)
	}
	rev := f.put(t, workload("w1", "10.0.0.1"))
	for _, p := range ps {
		waitRev(t, p, rev)
	}
	// Every proxy of one scope holds the same immutable snapshot.
	if ps[0].Snapshot() != ps[2].Snapshot() || ps[0].Snapshot() == ps[1].Snapshot() {
		t.Fatalf("snapshots are not shared by scope")
	}
	f.mu.Lock()
	_, ok := f.compiled[rev]
	f.mu.Unlock()
	if !ok {
		t.Fatalf("OnCompiled not called for revision %d", rev)
	}
	if in := f.rec.last(); in.Revision != rev || len(in.Objects) != 1 || in.Objects[0].Metadata.Name != "w1" {
		t.Fatalf("compile input = rev %d, %d objects", in.Revision, len(in.Objects))
	}
}

func TestGenerationsPerCompileAreOnePerScope(t *testing.T) {
	f := start(t, nil)
	p0, _ := f.cache.Connect(&node.Node{ID: "first", Namespace: "a"})
	defer p0.Close()
	waitRev(t, p0, 0)
	var ps []*Proxy
	for i := range 50 {
		p, _ := f.cache.Connect(&node.Node{ID: fmt.Sprintf("p%d", i), Namespace: "a"})
		defer p.Close()
		ps = append(ps, p)
	}
	before := f.rec.gens.Load()
	rev := f.put(t, workload("w1", "10.0.0.1"))
	for _, p := range ps {
		waitRev(t, p, rev)
	}
	if got := f.rec.gens.Load() - before; got != 1 {
		t.Fatalf("generations for 51 proxies of one scope = %d, want 1", got)
	}
}

func TestDebounceCoalescesBursts(t *testing.T) {
	f := start(t, func(c *Config) { c.Debounce = 50 * time.Millisecond; c.MaxDelay = 300 * time.Millisecond })
	p, _ := f.cache.Connect(&node.Node{ID: "p", Namespace: "a"})
	defer p.Close()
	waitRev(t, p, 0)
	base := f.rec.count()
	var rev int64
	for i := range 10 {
		rev = f.put(t, workload(fmt.Sprintf("w%d", i), "10.0.0.1"))
	}
	waitRev(t, p, rev)
	if n := f.rec.count() - base; n > 2 {
		t.Fatalf("a burst of 10 writes compiled %d times, want <= 2", n)
	}
	// Writes every 20ms never leave a 50ms quiet gap; MaxDelay still forces a
	// compile within ~300ms of the first write.
	start := time.Now()
	first := f.put(t, workload("x0", "10.0.0.2"))
	stop := make(chan struct{})
	done := make(chan struct{})
	go func() {
		defer close(done)
		for i := 1; ; i++ {
			select {
			case <-stop:
				return
			case <-time.After(20 * time.Millisecond): // pacing the writes, not a wait for a condition
				f.put(t, workload(fmt.Sprintf("x%d", i), "10.0.0.2"))
			}
		}
	}()
	waitRev(t, p, first)
	close(stop)
	<-done
	if d := time.Since(start); d > 2*time.Second {
		t.Fatalf("compile under continuous writes took %v; MaxDelay is 300ms", d)
	}
}

func TestRegisteringProxies(t *testing.T) {
	f := start(t, nil)
	plain, _ := f.cache.Connect(&node.Node{ID: "grpc-client"})
	defer plain.Close()
	waitRev(t, plain, 0)
	reg := &node.Node{ID: "sc-1", Namespace: "shop", Address: "10.1.0.1"}
	waitProxies := func(want []string) {
		t.Helper()
		testkit.Wait(t, 5*time.Second, func() error {
			var got []string
			if f.rec.count() > 0 {
				for _, n := range f.rec.last().Proxies {
					got = append(got, n.ID)
				}
			}
			if !cmp.Equal(want, got) {
				return fmt.Errorf("compiled proxies = %v, want %v", got, want)
			}
			return nil
		})
	}
	p1, _ := f.cache.Connect(reg)
	p2, _ := f.cache.Connect(&node.Node{ID: "sc-1", Namespace: "shop", Address: "10.1.0.2"}) // reconnect, newer wins
	waitProxies([]string{"sc-1"})
	if got := f.rec.last().Proxies[0].Address; got != "10.1.0.2" {
		t.Fatalf("duplicate id: compiled address %s, want the newest connection's 10.1.0.2", got)
	}
	p1.Close()
	p1.Close() // idempotent
	waitProxies([]string{"sc-1"})
	p2.Close()
	waitProxies(nil)
}

func TestCompileErrorKeepsSnapshots(t *testing.T) {
	f := start(t, nil)
	p, _ := f.cache.Connect(&node.Node{ID: "p", Namespace: "a"})
	defer p.Close()
	rev := f.put(t, workload("w1", "10.0.0.1"))
	good := waitRev(t, p, rev)
	f.rec.failNext.Store(true)
	f.put(t, workload("w2", "10.0.0.1"))
	testkit.Eventually(t, 5*time.Second, "compile attempted", func() bool { return !f.rec.failNext.Load() })
	if p.Snapshot() != good {
		t.Fatal("failed compile replaced the snapshot")
	}
	rev = f.put(t, workload("w3", "10.0.0.1"))
	waitRev(t, p, rev)
}

// flakyStore cuts its first watches off at once, like a watcher that fell behind.
type flakyStore struct {
	store.Store
	cuts atomic.Int32
}

type cutWatcher struct{ ch chan store.Event }

func (w cutWatcher) Events() <-chan store.Event { return w.ch }
func (w cutWatcher) Err() error                 { return errors.New("watcher fell behind") }

func (f *flakyStore) Watch(ctx context.Context, from store.Revision) (store.Watcher, error) {
	if f.cuts.Add(-1) >= 0 {
		ch := make(chan store.Event)
		close(ch)
		return cutWatcher{ch}, nil
	}
	return f.Store.Watch(ctx, from)
}

func TestWatchCutResyncs(t *testing.T) {
	var fs *flakyStore
	f := start(t, func(c *Config) {
		fs = &flakyStore{Store: c.Store}
		fs.cuts.Store(2)
		c.Store = fs
	})
	p, _ := f.cache.Connect(&node.Node{ID: "p", Namespace: "a"})
	defer p.Close()
	testkit.Wait(t, 5*time.Second, func() error { // two cut watches, then a real one
		if left := fs.cuts.Load() + 1; left > 0 {
			return fmt.Errorf("watch was not retried after being cut (%d cuts left)", left)
		}
		return nil
	})
	// Changes after the resync arrive.
	rev := f.put(t, workload("w1", "10.0.0.1"))
	waitRev(t, p, rev)
}

// offerAt waits for p's offer to satisfy ok and returns it.
func offerAt(t *testing.T, p *Proxy, what string, ok func(*snapshot.Snapshot, bool) bool) (*snapshot.Snapshot, bool) {
	t.Helper()
	deadline := time.After(5 * time.Second)
	for {
		if s, cur := p.Offer(); ok(s, cur) {
			return s, cur
		}
		select {
		case <-p.Changed():
		case <-deadline:
			s, cur := p.Offer()
			t.Fatalf("proxy %s: %s: offer is %v (current %v)", p.Node().ID, what, s, cur)
		}
	}
}

// TestNewProxyWaitsForCurrent: a proxy that connects after a write, while the
// cache still holds the mesh compiled before it, is offered nothing until the
// write is compiled, then that snapshot, current; a proxy already connected
// keeps its snapshot meanwhile.
func TestNewProxyWaitsForCurrent(t *testing.T) {
	f := start(t, func(c *Config) { c.CurrentWait = MaxCurrentWait })
	old, _ := f.cache.Connect(&node.Node{ID: "old", Namespace: "a"})
	defer old.Close()
	base := waitRev(t, old, 0)
	release := f.rec.hold()
	defer release()
	rev := f.put(t, workload("w1", "10.0.0.1"))
	p, err := f.cache.Connect(&node.Node{ID: "new", Namespace: "a"})
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	if p.StoreRevision() != rev {
		t.Fatalf("store revision at connect = %d, want %d", p.StoreRevision(), rev)
	}
	if s, cur := p.Offer(); s != nil || cur {
		t.Fatalf("offered revision %d (current %v) before revision %d was compiled", s.Revision, cur, rev)
	}
	if s, cur := old.Offer(); s != base || !cur {
		t.Fatalf("the connected proxy lost its snapshot while the next compiles")
	}
	release()
	s, _ := offerAt(t, p, "current offer", func(s *snapshot.Snapshot, cur bool) bool { return cur })
	if s.Revision < rev {
		t.Fatalf("current offer at revision %d, want >= %d", s.Revision, rev)
	}
}

// TestCurrentWaitBound: when the compile does not come, the proxy is offered
// nothing before CurrentWait and, at CurrentWait, the latest snapshot there is,
// marked not current; when the compile lands the offer turns current.
func TestCurrentWaitBound(t *testing.T) {
	const wait = 300 * time.Millisecond
	f := start(t, func(c *Config) { c.CurrentWait = wait })
	first, _ := f.cache.Connect(&node.Node{ID: "first", Namespace: "a"})
	defer first.Close()
	waitRev(t, first, 0)
	release := f.rec.hold()
	defer release()
	rev := f.put(t, workload("w1", "10.0.0.1"))
	connected := time.Now()
	p, _ := f.cache.Connect(&node.Node{ID: "late", Namespace: "a"})
	defer p.Close()
	s, cur := offerAt(t, p, "offer after the wait", func(s *snapshot.Snapshot, _ bool) bool { return s != nil })
	if waited := time.Since(connected); waited < wait {
		t.Fatalf("offered after %v, before CurrentWait %v", waited, wait)
	}
	if cur || s.Revision >= rev {
		t.Fatalf("offer after the wait: revision %d current %v, want the older revision, not current", s.Revision, cur)
	}
	release()
	s, _ = offerAt(t, p, "current offer", func(s *snapshot.Snapshot, cur bool) bool { return cur })
	if s.Revision < rev {
		t.Fatalf("current offer at revision %d, want >= %d", s.Revision, rev)
	}
}

// TestRegisteringProxyWaitsForItsOwnCompile: a proxy that registers a workload
// is current only on a compile that includes it, even with no store change.
func TestRegisteringProxyWaitsForItsOwnCompile(t *testing.T) {
	f := start(t, func(c *Config) { c.CurrentWait = MaxCurrentWait })
	plain, _ := f.cache.Connect(&node.Node{ID: "plain"})
	defer plain.Close()
	waitRev(t, plain, 0)
	release := f.rec.hold()
	defer release()
	p, _ := f.cache.Connect(&node.Node{ID: "sc-1", Namespace: "shop", Address: "10.1.0.1"})
	defer p.Close()
	if s, _ := p.Offer(); s != nil {
		t.Fatalf("registering proxy offered a snapshot compiled without it")
	}
	release()
	offerAt(t, p, "current offer", func(s *snapshot.Snapshot, cur bool) bool { return cur })
	var found bool
	for _, n := range f.rec.last().Proxies {
		found = found || n.ID == "sc-1"
	}
	if !found {
		t.Fatalf("current offer, but the last compile did not include the proxy")
	}
}

// TestOverrideWriteTimes: an Override written while pilot watches reaches
// compile with its revision's write time (the store event's); other kinds do
// not, and an Override that was only listed has none.
func TestOverrideWriteTimes(t *testing.T) {
	override := func(name string) *resource.Object {
		return &resource.Object{APIVersion: resource.APIVersion, Kind: resource.KindOverride,
			Metadata: resource.Metadata{Name: name, Namespace: "shop"},
			Spec:     &resource.OverrideSpec{TTL: "2s", Action: "DENY", Match: resource.OverrideMatch{Paths: []string{"/x"}}}}
	}
	f := start(t, nil)
	listed := f.put(t, override("listed")) // may be compiled as listed or watched; not asserted
	p, _ := f.cache.Connect(&node.Node{ID: "plain"})
	defer p.Close()
	waitRev(t, p, listed)
	before := time.Now()
	rev := f.put(t, override("watched"), workload("w", "10.0.0.1"))
	waitRev(t, p, rev)
	in := f.rec.last()
	at, ok := in.WriteTimes[rev]
	if !ok || at.Before(before.Add(-time.Second)) || at.After(time.Now()) {
		t.Fatalf("WriteTimes[%d] = %v, %v; want the write time (after %v)", rev, at, ok, before)
	}
	for r := range in.WriteTimes {
		if r != rev && r != listed {
			t.Errorf("WriteTimes has revision %d, which wrote no Override", r)
		}
	}
}

// TestProxylessServerIsCompiled: a proxyless node with a verified identity and
// an address is compiled (it makes the Workload at its address take mTLS); one
// without identity is not.
func TestProxylessServerIsCompiled(t *testing.T) {
	f := start(t, nil)
	anon, _ := f.cache.Connect(&node.Node{ID: "anon", Address: "10.0.0.9"})
	defer anon.Close()
	srv, _ := f.cache.Connect(&node.Node{ID: "srv", Address: "10.0.0.1", Identity: "spiffe://cluster.local/ns/shop/sa/default"})
	defer srv.Close()
	offerAt(t, srv, "current offer", func(s *snapshot.Snapshot, cur bool) bool { return cur })
	var ids []string
	for _, n := range f.rec.last().Proxies {
		ids = append(ids, n.ID)
	}
	if !slices.Equal(ids, []string{"srv"}) {
		t.Fatalf("compiled proxies = %v, want [srv]", ids)
	}
}

// meshes records what a real compile made, for tests of what compile reads.
type meshes struct {
	mu  sync.Mutex
	ins []compile.Input
	out []*ir.Mesh
}

func (r *meshes) compile(in compile.Input) (*ir.Mesh, error) {
	m, err := compile.Compile(in)
	if err == nil {
		r.mu.Lock()
		r.ins, r.out = append(r.ins, in), append(r.out, m)
		r.mu.Unlock()
	}
	return m, err
}

func (r *meshes) last() (compile.Input, *ir.Mesh, int) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if len(r.out) == 0 {
		return compile.Input{}, nil, 0
	}
	return r.ins[len(r.ins)-1], r.out[len(r.out)-1], len(r.out)
}

func overrideObj(name, ttl string) *resource.Object {
	return &resource.Object{APIVersion: resource.APIVersion, Kind: resource.KindOverride,
		Metadata: resource.Metadata{Name: name, Namespace: "shop"},
		Spec:     &resource.OverrideSpec{TTL: resource.Duration(ttl), Action: "DENY", Match: resource.OverrideMatch{Paths: []string{"/x"}}}}
}

// TestOverrideExpiryRecompiles: at an Override's expiry pilot compiles again,
// with no store write, and the expired Override is gone from the mesh (a
// proxyless gRPC server cannot expire it itself).
func TestOverrideExpiryRecompiles(t *testing.T) {
	r := &meshes{}
	f := start(t, func(c *Config) { c.Compile = r.compile })
	p, _ := f.cache.Connect(&node.Node{ID: "plain"})
	defer p.Close()
	rev := f.put(t, overrideObj("short", "300ms"))
	waitRev(t, p, rev)
	testkit.Wait(t, 5*time.Second, func() error {
		in, m, n := r.last()
		if m == nil || in.Revision != rev {
			return fmt.Errorf("no compile of revision %d yet", rev)
		}
		if len(m.Overrides) != 0 {
			return fmt.Errorf("compile %d at %v still has %d overrides (next expiry %v)", n, in.Now, len(m.Overrides), m.NextExpiry)
		}
		return nil
	})
	in, m, _ := r.last()
	if in.Revision != rev || !m.NextExpiry.IsZero() {
		t.Errorf("last compile: revision %d (want %d, no store write), next expiry %v (want none)", in.Revision, rev, m.NextExpiry)
	}
}

// TestListedOverrideWriteTime: an Override written before pilot started gets
// its write time from the store's history.
func TestListedOverrideWriteTime(t *testing.T) {
	r := &meshes{}
	var rev int64
	before := time.Now()
	start(t, func(c *Config) {
		c.Compile = r.compile
		res, err := c.Store.Apply(context.Background(), []store.Mutation{{Op: store.OpPut, Object: overrideObj("listed", "1h")}})
		if err != nil {
			t.Fatal(err)
		}
		rev = int64(res.Revision)
	})
	testkit.Wait(t, 5*time.Second, func() error {
		if _, m, _ := r.last(); m == nil {
			return fmt.Errorf("no compile yet")
		}
		return nil
	})
	in, m, _ := r.last()
	at, ok := in.WriteTimes[rev]
	if !ok || at.Before(before.Add(-time.Second)) || at.After(time.Now()) {
		t.Fatalf("WriteTimes[%d] = %v, %v: want the listed Override's write time", rev, at, ok)
	}
	if len(m.Overrides) != 1 || !m.Overrides[0].WrittenAt.Equal(at) || !m.NextExpiry.Equal(at.Add(time.Hour)) {
		t.Errorf("overrides %+v, next expiry %v", m.Overrides, m.NextExpiry)
	}
}

// DefaultScopeKey tells apart every node field generation reads: a sidecar
// that restarts at one address in another interception mode gets another
// snapshot (gen gives intercepted sidecars the VIP wire).
func TestDefaultScopeKeyInterception(t *testing.T) {
	a := &node.Node{ID: "a", Namespace: "shop", Address: "10.0.0.1"}
	b := *a
	b.Interception = node.InterceptionIPTables
	if DefaultScopeKey(a) == DefaultScopeKey(&b) {
		t.Fatal("explicit and intercepted nodes share a scope key")
	}
}
