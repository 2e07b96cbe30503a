// Package meshcache turns store revisions and the set of connected proxies into
// per-proxy xDS snapshots. It owns one loop that watches the store, debounces
// bursts, compiles the mesh once per burst and generates one snapshot per proxy
// scope (proxies whose scope keys are equal share one immutable snapshot, so a
// fleet of identical sidecars costs one gen.Proxy call). Each proxy's latest
// snapshot is published atomically and its stream is woken through a 1-buffered
// channel: producers never block and never send while holding a lock; streams
// pull the latest.
//
// A proxy that connects is offered a snapshot only once one is current for it:
// compiled from at least the store revision read when it connected and, for a
// proxy that registers a workload, with that proxy registered. Until then its
// stream gets nothing (a sidecar connecting right after an apply must not get
// the mesh compiled before the apply and report ready on it), for at most
// Config.CurrentWait; then the stream gets the latest snapshot there is, marked
// not current, and a warning is logged.
package meshcache

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hashicorp/go-hclog"

	"github.com/weft-mesh/weft/bootstrap/node"
	"github.com/weft-mesh/weft/pilot/compile"
	"github.com/weft-mesh/weft/pilot/ir"
	"github.com/weft-mesh/weft/pilot/resource"
	"github.com/weft-mesh/weft/pilot/store"
	"github.com/weft-mesh/weft/pilot/xds/gen"
	"github.com/weft-mesh/weft/pilot/xds/snapshot"
)

// Config configures a Cache. Store, Logger and the limits are required.
type Config struct {
	Store      store.Store
	Logger     hclog.Logger
	Debounce   time.Duration // quiet period after the last change before compiling
	MaxDelay   time.Duration // a burst is compiled at most this long after its first change
	GenWorkers int           // concurrent snapshot generations per compile
	// RegistrationDebounce and RegistrationMaxDelay are Debounce and MaxDelay
	// for a burst of registrations (registering proxies connecting or
	// leaving) without a store change: each compile pushes the grown
	// assignments to every proxy, so 2,000 sidecars joining are one push per
	// window, not one per sidecar (debounce.go). Zero means Debounce and
	// MaxDelay. Keep RegistrationMaxDelay below CurrentWait, so a joining
	// sidecar gets its current snapshot before its wait runs out.
	RegistrationDebounce time.Duration
	RegistrationMaxDelay time.Duration
	// CurrentWait bounds how long a newly connected proxy waits for a snapshot
	// current for it before it is offered an older one, marked not current.
	// 0 means DefaultCurrentWait; at most MaxCurrentWait.
	CurrentWait time.Duration

	// Compile and Generate default to compile.Compile and gen.Proxy; tests and
	// benchmarks replace them.
	Compile  func(compile.Input) (*ir.Mesh, error)
	Generate func(*ir.Mesh, *node.Node) (*snapshot.Snapshot, error)
	// ScopeKey maps a proxy to the key of its generated snapshot: proxies with
	// equal keys must get identical output from Generate. Default: DefaultScopeKey.
	ScopeKey func(*node.Node) string
	// OnCompiled, if set, is called after a successful compile, before its
	// snapshots are published, with the store revision and the time that revision was written.
	OnCompiled func(rev int64, writtenAt time.Time)
	// Shared, if set, shares registrations with the other pilot replicas on
	// the same store (pilot/xds/regshare on etcd): the registrations of the
	// proxies connected here are published to it, and the other replicas'
	// are compiled with the local ones, coalesced by the registration
	// debounce. Nil (one replica, boltstore): only local proxies register.
	Shared Shared
}

// Shared is the registrations of the other replicas, and where this one
// publishes its own. Publish and Withdraw must not block on I/O (they are
// called with the cache's lock held, to keep their order that of the
// connections).
type Shared interface {
	// Publish shares n, registered by a proxy connected here; an error (a
	// bound) refuses the connection.
	Publish(n *node.Node) error
	// Withdraw takes node id's registration back.
	Withdraw(id string)
	// Remote is every other replica's registered nodes, one per id.
	Remote() []*node.Node
	// Changed is signalled (coalesced) when Remote may have changed.
	Changed() <-chan struct{}
}

func (c *Config) check() error {
	switch {
	case c.Store == nil:
		return errors.New("meshcache: Config.Store is required")
	case c.Logger == nil:
		return errors.New("meshcache: Config.Logger is required")
	case c.Debounce <= 0:
		return fmt.Errorf("meshcache: Config.Debounce must be > 0, got %v", c.Debounce)
	case c.MaxDelay < c.Debounce:
		return fmt.Errorf("meshcache: Config.MaxDelay must be >= Debounce (%v), got %v", c.Debounce, c.MaxDelay)
	case c.GenWorkers <= 0:
		return fmt.Errorf("meshcache: Config.GenWorkers must be > 0, got %d", c.GenWorkers)
	case c.CurrentWait < 0 || c.CurrentWait > MaxCurrentWait:
		return fmt.Errorf("meshcache: Config.CurrentWait must be in [0, %v], got %v", MaxCurrentWait, c.CurrentWait)
	}
	if c.CurrentWait == 0 {
		c.CurrentWait = DefaultCurrentWait
	}
	if c.RegistrationDebounce == 0 {
		c.RegistrationDebounce = c.Debounce
	}
	if c.RegistrationMaxDelay == 0 {
		c.RegistrationMaxDelay = c.MaxDelay
	}
	switch {
	case c.RegistrationDebounce < 0:
		return fmt.Errorf("meshcache: Config.RegistrationDebounce must be >= 0, got %v", c.RegistrationDebounce)
	case c.RegistrationMaxDelay < c.RegistrationDebounce:
		return fmt.Errorf("meshcache: Config.RegistrationMaxDelay must be >= RegistrationDebounce (%v), got %v", c.RegistrationDebounce, c.RegistrationMaxDelay)
	}
	if c.Compile == nil {
		c.Compile = compile.Compile
	}
	if c.Generate == nil {
		c.Generate = gen.Proxy
	}
	if c.ScopeKey == nil {
		c.ScopeKey = DefaultScopeKey
	}
	return nil
}

// Bounds of Config.CurrentWait. The default covers a debounced compile at the
// longest (MaxDelay, 1s in production) plus the compile itself with room to
// spare; past it a proxy is better served by what pilot has than by nothing.
const (
	DefaultCurrentWait = 5 * time.Second
	MaxCurrentWait     = time.Minute
)

// DefaultScopeKey is every node field generation may read except the ID and the
// informational build version, so only proxies that present the same identity
// share a snapshot.
func DefaultScopeKey(n *node.Node) string {
	return strings.Join([]string{n.Namespace, n.ServiceAccount, node.LabelString(n.Labels), n.Address,
		strconv.FormatUint(uint64(n.InboundPort), 10), n.Locality.String(), n.Identity, strconv.FormatBool(n.Proxyless), n.Interception}, "\x00")
}

// ScopeKey is the key the cache generates n's snapshot under (Config.ScopeKey).
func (c *Cache) ScopeKey(n *node.Node) string { return c.cfg.ScopeKey(n) }

// Cache is safe for concurrent use. Run must be running for snapshots to exist.
type Cache struct {
	cfg Config
	log hclog.Logger

	mu      sync.Mutex          // guards proxies and seq
	proxies map[*Proxy]struct{} // connected proxies
	seq     int64               // connection order, to prefer the newest of duplicate ids

	kick    chan struct{}              // 1-buffered: the set of registering proxies changed
	current atomic.Pointer[generation] // latest compiled mesh; nil before the first compile
	gens    atomic.Int64               // generation counter
}

// generation is one compiled mesh and the snapshots generated from it, by scope.
type generation struct {
	seq       int64
	mesh      *ir.Mesh
	rev       int64
	listed    int64 // Cache.seq when the compiled proxies were listed: every proxy with seq <= listed still connected is in mesh
	writtenAt time.Time

	mu      sync.Mutex // guards byScope
	byScope map[string]*scoped
}

type scoped struct {
	once sync.Once
	snap *snapshot.Snapshot
	err  error
}

// New checks cfg.
func New(cfg Config) (*Cache, error) {
	if err := cfg.check(); err != nil {
		return nil, err
	}
	return &Cache{cfg: cfg, log: cfg.Logger, proxies: map[*Proxy]struct{}{}, kick: make(chan struct{}, 1)}, nil
}

// Proxy is one connected proxy's view of the cache.
type Proxy struct {
	c        *Cache
	node     *node.Node
	key      string
	seq      int64
	storeRev int64         // store revision when the proxy connected
	changed  chan struct{} // 1-buffered wakeup
	latest   atomic.Pointer[published]
	waitOver atomic.Bool // CurrentWait has passed since Connect
	timer    *time.Timer // ends the wait; set in Connect, stopped by Close
	closed   atomic.Bool
}

// published is one generation's snapshot for a proxy, with what decides whether
// it is current for that proxy.
type published struct {
	gen    int64
	rev    int64
	listed int64
	snap   *snapshot.Snapshot
}

// Connect registers a proxy. If it registers a workload (node.Registers), the mesh
// is recompiled with it (debounced). It reads the store's revision first: the
// proxy is offered a snapshot once one compiled from at least that revision (and
// with the proxy registered) is published, or CurrentWait from now, whichever
// comes first (see Offer).
func (c *Cache) Connect(n *node.Node) (*Proxy, error) {
	if n == nil || n.ID == "" {
		return nil, errors.New("meshcache: connect: node id is required")
	}
	ctx, cancel := context.WithTimeout(context.Background(), c.cfg.CurrentWait)
	rev, err := c.cfg.Store.Revision(ctx)
	cancel()
	if err != nil {
		return nil, fmt.Errorf("meshcache: connect %s: read store revision: %w", n.ID, err)
	}
	p := &Proxy{c: c, node: n, key: c.cfg.ScopeKey(n), storeRev: int64(rev), changed: make(chan struct{}, 1)}
	c.mu.Lock()
	if c.cfg.Shared != nil && compiled(n) {
		if err := c.cfg.Shared.Publish(n); err != nil {
			c.mu.Unlock()
			return nil, fmt.Errorf("meshcache: connect %s: share its registration: %w", n.ID, err)
		}
	}
	c.seq++
	p.seq = c.seq
	c.proxies[p] = struct{}{}
	p.timer = time.AfterFunc(c.cfg.CurrentWait, p.endWait)
	c.mu.Unlock()
	if compiled(n) {
		c.poke()
	}
	if g := c.current.Load(); g != nil {
		if s, err := g.snapshot(c, p); err == nil {
			p.set(g, s)
		}
	}
	return p, nil
}

// endWait ends the wait for a current snapshot: from now on Offer hands out
// whatever the proxy has.
func (p *Proxy) endWait() {
	p.waitOver.Store(true)
	if p.closed.Load() {
		return
	}
	l := p.latest.Load()
	if l != nil && p.currentFor(l) {
		return
	}
	have := "none"
	if l != nil {
		have = strconv.FormatInt(l.rev, 10)
	}
	p.c.log.Warn("no snapshot current for the proxy within the wait; its stream gets the latest there is, marked not current",
		"node", p.node.ID, "wait", p.c.cfg.CurrentWait, "store_revision", p.storeRev, "have_revision", have)
	p.wake()
}

// currentFor reports whether l is current for p: compiled from at least the
// store revision p connected at and, if p registers, with p registered.
func (p *Proxy) currentFor(l *published) bool {
	return l.rev >= p.storeRev && (!compiled(p.node) || l.listed >= p.seq)
}

func (c *Cache) poke() {
	select {
	case c.kick <- struct{}{}:
	default:
	}
}

// Node is the identity the proxy connected with.
func (p *Proxy) Node() *node.Node { return p.node }

// Offer is what the proxy's stream should send now. Once a snapshot current
// for the proxy is published it is that snapshot (and every later one), with
// current=true. Before that it is nil until CurrentWait has passed since
// Connect, then the latest snapshot there is (nil if none) with current=false.
func (p *Proxy) Offer() (snap *snapshot.Snapshot, current bool) {
	l := p.latest.Load()
	switch {
	case l == nil:
		return nil, false
	case p.currentFor(l):
		return l.snap, true
	case p.waitOver.Load():
		return l.snap, false
	}
	return nil, false
}

// Snapshot is Offer's snapshot (ads.Watch).
func (p *Proxy) Snapshot() *snapshot.Snapshot {
	s, _ := p.Offer()
	return s
}

// StoreRevision is the store revision read when the proxy connected.
func (p *Proxy) StoreRevision() int64 { return p.storeRev }

// Changed is signalled (coalesced) whenever Snapshot may have changed, or
// Wake was called.
func (p *Proxy) Changed() <-chan struct{} { return p.changed }

// Wake signals Changed as a change of the snapshot would: a layer over the
// cache that adds to its snapshots (pilot/xds/publish) wakes the stream
// through it, so the stream waits on one channel and nothing forwards.
func (p *Proxy) Wake() { p.wake() }

// Close unregisters the proxy; a registered workload leaves the mesh.
func (p *Proxy) Close() {
	if p.closed.Swap(true) {
		return
	}
	p.timer.Stop()
	c := p.c
	c.mu.Lock()
	delete(c.proxies, p)
	if c.cfg.Shared != nil && compiled(p.node) {
		// Another connection of the same node may remain (a reconnect that
		// came first): it stays shared.
		var next *Proxy
		for q := range c.proxies {
			if q.node.ID == p.node.ID && compiled(q.node) && (next == nil || q.seq > next.seq) {
				next = q
			}
		}
		if next == nil {
			c.cfg.Shared.Withdraw(p.node.ID)
		} else if err := c.cfg.Shared.Publish(next.node); err != nil {
			c.log.Warn("re-sharing a remaining connection's registration failed", "node", next.node.ID, "error", err)
		}
	}
	c.mu.Unlock()
	if compiled(p.node) {
		c.poke()
	}
}

// set publishes g's snapshot s unless a newer generation was already
// published, then wakes the stream if what Offer returns may have changed.
func (p *Proxy) set(g *generation, s *snapshot.Snapshot) {
	next := &published{gen: g.seq, rev: g.rev, listed: g.listed, snap: s}
	for {
		cur := p.latest.Load()
		if cur != nil && cur.gen >= g.seq {
			return
		}
		if p.latest.CompareAndSwap(cur, next) {
			if cur != nil && cur.snap == s && p.currentFor(cur) == p.currentFor(next) {
				return // the same snapshot, and still as current as it was
			}
			break
		}
	}
	p.wake()
}

func (p *Proxy) wake() {
	select {
	case p.changed <- struct{}{}:
	default:
	}
}

func (g *generation) snapshot(c *Cache, p *Proxy) (*snapshot.Snapshot, error) {
	g.mu.Lock()
	e, ok := g.byScope[p.key]
	if !ok {
		e = &scoped{}
		g.byScope[p.key] = e
	}
	g.mu.Unlock()
	e.once.Do(func() {
		e.snap, e.err = c.cfg.Generate(g.mesh, p.node)
		if e.err != nil {
			e.err = fmt.Errorf("generate snapshot for %s at revision %d: %w", p.node.ID, g.rev, e.err)
		}
	})
	return e.snap, e.err
}

// Run lists the store, compiles, then follows the store's watch until ctx ends.
// A watch that is cut off (it fell behind) is resumed from a fresh list.
func (c *Cache) Run(ctx context.Context) error {
	backoff := resyncMin
	for {
		start := time.Now()
		err := c.follow(ctx)
		if ctx.Err() != nil {
			return nil
		}
		if err == nil || errors.Is(err, store.ErrClosed) {
			return err
		}
		if time.Since(start) > resyncMax {
			backoff = resyncMin // it ran fine for a while: a new problem
		}
		c.log.Warn("store watch ended, resyncing", "error", err, "after", backoff)
		select {
		case <-ctx.Done():
			return nil
		case <-time.After(backoff):
		}
		backoff = min(2*backoff, resyncMax)
	}
}

// Bounds of the wait between store resyncs, so a failing store is not hammered.
const (
	resyncMin = 50 * time.Millisecond
	resyncMax = 5 * time.Second
)

// follow is one list+watch cycle. It owns objects and the debounce state.
func (c *Cache) follow(ctx context.Context) error {
	list, rev, err := c.cfg.Store.List(ctx, "", "")
	if err != nil {
		return fmt.Errorf("meshcache: list store: %w", err)
	}
	objects := make(map[resource.Key]*resource.Object, len(list))
	for _, o := range list {
		objects[o.Key()] = o
	}
	wctx, cancel := context.WithCancel(ctx)
	defer cancel()
	w, err := c.cfg.Store.Watch(wctx, rev)
	if err != nil {
		return fmt.Errorf("meshcache: watch store from revision %d: %w", rev, err)
	}
	writtenAt := time.Now() // unknown for a listed revision: treat the list as the write
	// putAt is when each object's current revision was written, for the
	// objects written while pilot watched and the Overrides listed (from their
	// history): an Override's expiry reads it (compile.Input.WriteTimes).
	putAt := c.listedOverrideTimes(ctx, objects)

	var shared <-chan struct{} // nil: no other replicas
	if c.cfg.Shared != nil {
		shared = c.cfg.Shared.Changed()
	}
	var (
		timer *time.Timer
		fire  <-chan time.Time
		deb   = debouncer{storeQuiet: c.cfg.Debounce, storeMax: c.cfg.MaxDelay,
			regQuiet: c.cfg.RegistrationDebounce, regMax: c.cfg.RegistrationMaxDelay}
		// expiry fires at the next Override expiry (ir.Mesh.NextExpiry):
		// compiling again then takes the expired Override out.
		expiry   *time.Timer
		expireAt <-chan time.Time
	)
	defer func() {
		if timer != nil {
			timer.Stop()
		}
		if expiry != nil {
			expiry.Stop()
		}
	}()
	build := func() {
		next := c.build(objects, int64(rev), writtenAt, putAt)
		if expiry != nil {
			expiry.Stop()
			expiry, expireAt = nil, nil
		}
		if !next.IsZero() {
			expiry = time.NewTimer(time.Until(next))
			expireAt = expiry.C
		}
	}
	build()
	// schedule arms the timer for the pending burst (debouncer).
	schedule := func() {
		at, ok := deb.Due()
		if !ok {
			return
		}
		d := max(time.Until(at), 0)
		if timer == nil {
			timer = time.NewTimer(d)
		} else {
			timer.Reset(d)
		}
		fire = timer.C
	}
	apply := func(ev store.Event) {
		k := ev.Object.Key()
		if ev.Op == store.OpDelete {
			delete(objects, k)
			delete(putAt, k)
		} else {
			objects[k] = ev.Object
			putAt[k] = ev.Time
		}
		rev, writtenAt = ev.Revision, ev.Time
	}
	for {
		select {
		case <-ctx.Done():
			return nil
		case ev, ok := <-w.Events():
			if !ok {
				if ctx.Err() != nil {
					return nil
				}
				return fmt.Errorf("meshcache: store watch closed: %w", w.Err())
			}
			apply(ev)
			deb.Store(time.Now())
			schedule()
		case <-c.kick:
			deb.Registration(time.Now())
			schedule()
		case <-shared:
			deb.Registration(time.Now())
			schedule()
		case <-fire:
			fire = nil
			deb.Fire()
			// Take every event already delivered so a multi-object revision is
			// compiled whole (the store delivers one revision's events together).
		drain:
			for {
				select {
				case ev, ok := <-w.Events():
					if !ok {
						break drain
					}
					apply(ev)
				default:
					break drain
				}
			}
			build()
		case <-expireAt:
			expiry, expireAt = nil, nil
			deb.Store(time.Now())
			schedule()
		}
	}
}

// listedOverrideTimes finds when each listed Override's current revision was
// written, from its store history; one whose history is gone stays unknown
// (the sidecar then times it from when it first sees it).
func (c *Cache) listedOverrideTimes(ctx context.Context, objects map[resource.Key]*resource.Object) map[resource.Key]time.Time {
	out := map[resource.Key]time.Time{}
	for k, o := range objects {
		if o.Kind != resource.KindOverride {
			continue
		}
		h, err := c.cfg.Store.History(ctx, k)
		if err != nil {
			c.log.Warn("no write time for an Override: its expiry is timed by sidecars alone", "override", k.String(), "error", err)
			continue
		}
		for _, ev := range h {
			if int64(ev.Revision) == o.Metadata.Revision && ev.Op == store.OpPut {
				out[k] = ev.Time
			}
		}
	}
	return out
}

// build compiles objects at rev with the registering proxies and publishes a
// snapshot to every connected proxy. On a compile error the previous snapshots
// stay in place.
// It returns the next Override expiry of the compiled mesh (zero: none).
func (c *Cache) build(objects map[resource.Key]*resource.Object, rev int64, writtenAt time.Time, putAt map[resource.Key]time.Time) time.Time {
	objs := make([]*resource.Object, 0, len(objects))
	var writeTimes map[int64]time.Time
	for k, o := range objects {
		objs = append(objs, o)
		if at, ok := putAt[k]; ok && o.Kind == resource.KindOverride && !at.IsZero() {
			if writeTimes == nil {
				writeTimes = map[int64]time.Time{}
			}
			writeTimes[o.Metadata.Revision] = at
		}
	}
	sort.Slice(objs, func(i, j int) bool { return lessKey(objs[i].Key(), objs[j].Key()) })
	proxies, listed := c.connected()
	mesh, err := c.cfg.Compile(compile.Input{Revision: rev, Objects: objs, Proxies: c.registered(proxies), WriteTimes: writeTimes, Now: time.Now()})
	if err != nil {
		c.log.Error("compile failed; proxies keep their snapshots", "revision", rev, "error", err)
		return time.Time{}
	}
	g := &generation{seq: c.gens.Add(1), mesh: mesh, rev: rev, listed: listed, writtenAt: writtenAt, byScope: map[string]*scoped{}}
	if c.cfg.OnCompiled != nil {
		// Before publishing, so an ACK can never precede the revision's record.
		c.cfg.OnCompiled(rev, writtenAt)
	}
	c.current.Store(g)
	// Proxies that connect from here on get g in Connect; the ones listed before
	// are published below. set ignores an older generation either way.
	proxies, _ = c.connected()
	groups := map[string][]*Proxy{}
	var keys []string
	for _, p := range proxies {
		if _, ok := groups[p.key]; !ok {
			keys = append(keys, p.key)
		}
		groups[p.key] = append(groups[p.key], p)
	}
	work := make(chan string)
	var wg sync.WaitGroup
	for range min(c.cfg.GenWorkers, len(keys)) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for k := range work {
				ps := groups[k]
				s, err := g.snapshot(c, ps[0])
				if err != nil {
					c.log.Error("generation failed; proxies keep their snapshots", "scope_proxies", len(ps), "error", err)
					continue
				}
				for _, p := range ps {
					p.set(g, s)
				}
			}
		}()
	}
	for _, k := range keys {
		work <- k
	}
	close(work)
	wg.Wait()
	c.log.Debug("published", "revision", rev, "proxies", len(proxies), "scopes", len(keys))
	return mesh.NextExpiry
}

// connected lists the connected proxies and the latest connection's seq.
func (c *Cache) connected() ([]*Proxy, int64) {
	c.mu.Lock()
	defer c.mu.Unlock()
	out := make([]*Proxy, 0, len(c.proxies))
	for p := range c.proxies {
		out = append(out, p)
	}
	return out, c.seq
}

// registering returns the nodes that register a workload, one per node id (the
// newest connection wins), sorted by id so compile input is deterministic.
// compiled reports whether compile reads n: it registers a workload, or it is
// a proxyless server with a verified identity and an address, which makes the
// Workload at that address take mTLS (compile.Input.Proxies).
func compiled(n *node.Node) bool {
	return n.Registers() || n.Identity != "" && n.Address != ""
}

func registering(ps []*Proxy) []*node.Node {
	byID := map[string]*Proxy{}
	for _, p := range ps {
		if !compiled(p.node) {
			continue
		}
		if cur, ok := byID[p.node.ID]; !ok || p.seq > cur.seq {
			byID[p.node.ID] = p
		}
	}
	out := make([]*node.Node, 0, len(byID))
	for _, p := range byID {
		out = append(out, p.node)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].ID < out[j].ID })
	return out
}

// registered is registering(ps) and the other replicas' registrations of
// nodes not connected here (a node that reconnected here while its old
// replica still shares it is the local one).
func (c *Cache) registered(ps []*Proxy) []*node.Node {
	local := registering(ps)
	if c.cfg.Shared == nil {
		return local
	}
	remote := c.cfg.Shared.Remote()
	if len(remote) == 0 {
		return local
	}
	here := make(map[string]struct{}, len(local))
	for _, n := range local {
		here[n.ID] = struct{}{}
	}
	out := local
	for _, n := range remote {
		if _, ok := here[n.ID]; !ok {
			out = append(out, n)
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].ID < out[j].ID })
	return out
}

func lessKey(a, b resource.Key) bool {
	if a.Kind != b.Kind {
		return a.Kind < b.Kind
	}
	if a.Namespace != b.Namespace {
		return a.Namespace < b.Namespace
	}
	return a.Name < b.Name
}
