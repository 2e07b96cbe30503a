package server

import (
	"crypto/ed25519"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/hashicorp/go-hclog"

	"github.com/weft-mesh/weft/bootstrap/node"
	"github.com/weft-mesh/weft/certs/manifest"
	"github.com/weft-mesh/weft/pilot/ir"
	"github.com/weft-mesh/weft/pilot/status"
	"github.com/weft-mesh/weft/pilot/xds/ads"
	"github.com/weft-mesh/weft/pilot/xds/gen"
	"github.com/weft-mesh/weft/pilot/xds/meshcache"
	"github.com/weft-mesh/weft/pilot/xds/sign"
	"github.com/weft-mesh/weft/pilot/xds/snapshot"
	"github.com/weft-mesh/weft/sidecar/dataplane"
	"github.com/weft-mesh/weft/sidecar/xdsresource"
)

// sourceConfig configures the ADS source that sits between meshcache and ads.
type sourceConfig struct {
	Logger   hclog.Logger
	Key      ed25519.PrivateKey // publisher key signing every sidecar's manifest
	Validity time.Duration      // manifest validity; re-signed at half of it
	Clock    func() time.Time   // nil = time.Now
	// ReportGenError shows a proxy's failed (msg != "") or recovered (msg == "")
	// generation in its status.
	ReportGenError func(nodeID string, rev int64, msg string)
}

// source adds to meshcache what is per node rather than per scope: the signed
// manifest of a Weft sidecar (its content part shared per scope, its binding per
// node), and the report of a snapshot that failed the
// sidecar's validation to every proxy of its scope.
type source struct {
	cfg      sourceConfig
	cache    *meshcache.Cache // set once before the first Connect
	checked  checkCache
	contents *contentCache

	mu     sync.Mutex                     // guards scopes and errs
	scopes map[string]map[*watch]struct{} // scope key -> open watches
	errs   map[string]scopeErr            // scope key -> latest generation outcome, when it failed
}

type scopeErr struct {
	rev int64
	msg string
}

func newSource(cfg sourceConfig) *source {
	if cfg.Clock == nil {
		cfg.Clock = time.Now
	}
	return &source{cfg: cfg, scopes: map[string]map[*watch]struct{}{}, errs: map[string]scopeErr{}, checked: checkCache{max: maxCheckEntries, run: checkSidecar},
		contents: newContentCache(cfg.Key, cfg.Validity)}
}

// generate wraps gen.Proxy: a Weft sidecar's snapshot must also pass the sidecar's
// own decoding and compile (sidecar/xdsresource, sidecar/dataplane), so a push the
// sidecar would NACK is caught here, logged and not sent. meshcache calls it once
// per scope per compiled mesh, so the check is shared like the snapshot.
func (s *source) generate(g func(*ir.Mesh, *node.Node) (*snapshot.Snapshot, error)) func(*ir.Mesh, *node.Node) (*snapshot.Snapshot, error) {
	return func(m *ir.Mesh, n *node.Node) (*snapshot.Snapshot, error) {
		snap, err := g(m, n)
		if err == nil && n.Registers() {
			if verr := s.checked.check(snap); verr != nil {
				err = fmt.Errorf("snapshot for %s at revision %d fails sidecar validation, not sent: %w", n.ID, m.Revision, verr)
			}
		}
		s.recordGen(meshcache.DefaultScopeKey(n), m.Revision, err)
		return snap, err
	}
}

// checkCache remembers checkSidecar's verdict by snapshot content, so sidecars
// whose scopes differ (each registers its own address) but whose generated
// content is equal (replicas of one workload) are checked once per compiled mesh.
type checkCache struct {
	max int
	run func(*snapshot.Snapshot) error // checkSidecar

	mu sync.Mutex // guards m
	m  map[string]*checkEntry
}

type checkEntry struct {
	once sync.Once
	err  error
}

// maxCheckEntries bounds the verdicts kept; the cache restarts empty when full
// (one compiled mesh needs one entry per distinct content).
const maxCheckEntries = 4096

func (c *checkCache) check(snap *snapshot.Snapshot) error {
	key := contentKey(snap)
	c.mu.Lock()
	e, ok := c.m[key]
	if !ok {
		if c.m == nil || len(c.m) >= c.max {
			c.m = map[string]*checkEntry{}
		}
		e = &checkEntry{}
		c.m[key] = e
	}
	c.mu.Unlock()
	e.once.Do(func() { e.err = c.run(snap) })
	return e.err
}

// contentKey identifies what checkSidecar reads: the per-type versions (hashes of
// every name and content hash) of the types it decodes.
func contentKey(snap *snapshot.Snapshot) string {
	var b strings.Builder
	for _, typ := range checkedTypes {
		b.WriteString(snap.Version(typ))
		b.WriteByte(0)
	}
	return b.String()
}

var checkedTypes = []string{snapshot.ClusterType, snapshot.EndpointType, snapshot.ListenerType, snapshot.RouteType, snapshot.StalenessType}

// checkSidecar runs a snapshot through exactly what a Weft sidecar runs before
// activating it.
func checkSidecar(snap *snapshot.Snapshot) error {
	state := map[string]map[string]any{}
	for _, typ := range checkedTypes {
		byName := map[string]any{}
		for name, r := range snap.Resources[typ] {
			got, v, err := xdsresource.Decode(typ, r.Any)
			if err != nil {
				return fmt.Errorf("%s %q: %w", status.TypeName(typ), name, err)
			}
			byName[got] = v
		}
		state[typ] = byName
	}
	if _, err := dataplane.Compile(state); err != nil {
		return fmt.Errorf("compile: %w", err)
	}
	return nil
}

// recordGen remembers a scope's failed generation (or clears it) and wakes the
// scope's streams so each reports it for its proxy.
func (s *source) recordGen(key string, rev int64, err error) {
	s.mu.Lock()
	prev, had := s.errs[key]
	if had && rev < prev.rev {
		s.mu.Unlock()
		return
	}
	var ws []*watch
	if err != nil {
		s.errs[key] = scopeErr{rev: rev, msg: err.Error()}
		s.cfg.Logger.Error("generated snapshot refused", "revision", rev, "error", err)
	} else {
		delete(s.errs, key)
	}
	if err != nil || had {
		for w := range s.scopes[key] {
			ws = append(ws, w)
		}
	}
	s.mu.Unlock()
	for _, w := range ws {
		w.poke()
	}
}

func (s *source) scopeError(key string) scopeErr {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.errs[key]
}

// Connect implements ads.Source.
func (s *source) Connect(n *node.Node) (ads.Watch, error) {
	p, err := s.cache.Connect(n)
	if err != nil {
		return nil, err
	}
	w := &watch{s: s, p: p, n: n, key: meshcache.DefaultScopeKey(n), changed: make(chan struct{}, 1), stop: make(chan struct{}), done: make(chan struct{})}
	if n.Registers() {
		w.scope = manifestScope(n)
		s.contents.acquire(w.scope)
	}
	s.mu.Lock()
	if s.scopes[w.key] == nil {
		s.scopes[w.key] = map[*watch]struct{}{}
	}
	s.scopes[w.key][w] = struct{}{}
	s.mu.Unlock()
	go w.forward()
	w.poke() // the first Snapshot call reports a generation error that predates the stream
	return w, nil
}

// manifestScope names the group of sidecars that get identical snapshots
// (gen.ScopeKey: namespace, inbound port, labels), hashed so it is short and
// injective whatever bytes labels hold. Its content statement is signed once and
// shared by the group; each sidecar's binding names it.
func manifestScope(n *node.Node) string {
	sum := sha256.Sum256([]byte(gen.ScopeKey(n)))
	return hex.EncodeToString(sum[:16])
}

// watch is one stream's view: meshcache's snapshot, plus the sidecar's manifest.
type watch struct {
	s       *source
	p       *meshcache.Proxy
	n       *node.Node
	key     string
	scope   string        // manifest scope; "" for a node that gets no manifest
	changed chan struct{} // 1-buffered: meshcache changed, a re-sign is due, or a generation failed
	stop    chan struct{}
	done    chan struct{}

	mu       sync.Mutex // guards the fields below (Snapshot runs on the stream's owner goroutine, timers elsewhere)
	base     *snapshot.Snapshot
	content  *manifest.Signed // content part in signed
	binding  *manifest.Signed // this node's binding, signed when it connected or last re-signed
	bindAt   time.Time        // binding's issue time
	signed   *snapshot.Snapshot
	timer    *time.Timer
	reported string // generation error last reported to status
	closed   bool
}

func (w *watch) forward() {
	defer close(w.done)
	for {
		select {
		case <-w.p.Changed():
			w.poke()
		case <-w.stop:
			return
		}
	}
}

func (w *watch) poke() {
	select {
	case w.changed <- struct{}{}:
	default:
	}
}

// Changed implements ads.Watch.
func (w *watch) Changed() <-chan struct{} { return w.changed }

// Snapshot implements ads.Watch: the latest generated snapshot, with this node's
// signed manifest added when the node is a Weft sidecar. The manifest joins the
// scope's shared content statement (signed once per scope snapshot, again only
// when the content changes or at half its validity) with this node's binding
// (signed at the first Snapshot and again at half its validity). It runs on the
// stream's goroutine, so the per-node work is spread over the streams.
func (w *watch) Snapshot() *snapshot.Snapshot {
	w.reportGenError()
	base := w.p.Snapshot()
	if base == nil || w.scope == "" {
		return base
	}
	now := w.s.cfg.Clock()
	half := w.s.cfg.Validity / 2
	ce, err := w.s.contents.get(w.scope, base, now)
	w.mu.Lock()
	defer w.mu.Unlock()
	if err != nil {
		// Signing only fails on a programming error (bad key, nil snapshot):
		// keep what the proxy has.
		w.s.cfg.Logger.Error("signing manifest content failed; proxy keeps its snapshot", "node", w.n.ID, "revision", base.Revision, "error", err)
		return w.signed
	}
	if w.binding == nil || !now.Before(w.bindAt.Add(half)) {
		b, err := sign.Binding(w.s.cfg.Key, w.n.ID, w.scope, now, w.s.cfg.Validity)
		if err != nil {
			w.s.cfg.Logger.Error("signing manifest binding failed; proxy keeps its snapshot", "node", w.n.ID, "error", err)
			return w.signed
		}
		w.binding, w.bindAt = b, now
	} else if ce.signed == w.content {
		if base != w.base {
			// A new revision (or a recompile) with the same content: the
			// signature still covers it, so it is not signed and sent again.
			w.base, w.signed = base, withSet(base, snapshot.ManifestType, w.signed)
		}
		return w.signed
	}
	r, err := sign.Resource(ce.signed, w.binding)
	if err != nil {
		w.s.cfg.Logger.Error("assembling manifest failed; proxy keeps its snapshot", "node", w.n.ID, "revision", base.Revision, "error", err)
		return w.signed
	}
	w.base, w.content = base, ce.signed
	w.signed = withSet(base, snapshot.ManifestType, snapshot.FromSets(base.Revision, map[string]snapshot.Set{
		snapshot.ManifestType: snapshot.NewSet(map[string]snapshot.Resource{r.Name: r})}))
	// Wake at the earlier half-life of the two parts: the next Snapshot re-signs
	// whichever is due.
	due := ce.issued
	if w.bindAt.Before(due) {
		due = w.bindAt
	}
	if w.timer != nil {
		w.timer.Stop()
	}
	if !w.closed {
		w.timer = time.AfterFunc(max(due.Add(half).Sub(now), 0), w.poke)
	}
	return w.signed
}

// reportGenError shows (or clears) a failed generation of this proxy's scope in
// its status.
func (w *watch) reportGenError() {
	e := w.s.scopeError(w.key)
	w.mu.Lock()
	changed := e.msg != w.reported
	w.reported = e.msg
	w.mu.Unlock()
	if changed {
		w.s.cfg.ReportGenError(w.n.ID, e.rev, e.msg)
	}
}

// Close implements ads.Watch.
func (w *watch) Close() {
	w.s.mu.Lock()
	delete(w.s.scopes[w.key], w)
	if len(w.s.scopes[w.key]) == 0 {
		delete(w.s.scopes, w.key)
	}
	w.s.mu.Unlock()
	if w.scope != "" {
		w.s.contents.release(w.scope)
	}
	w.mu.Lock()
	w.closed = true
	if w.timer != nil {
		w.timer.Stop()
	}
	w.mu.Unlock()
	close(w.stop)
	<-w.done
	w.p.Close()
}

// sameContent reports whether a and b hold the same resources (every type's
// version is a hash of its names and content hashes).
func sameContent(a, b *snapshot.Snapshot) bool {
	if len(a.Resources) != len(b.Resources) {
		return false
	}
	for typ := range a.Resources {
		if _, ok := b.Resources[typ]; !ok || a.Version(typ) != b.Version(typ) {
			return false
		}
	}
	return true
}

// withSet returns base (its revision and sets) plus type typ taken from from.
func withSet(base *snapshot.Snapshot, typ string, from *snapshot.Snapshot) *snapshot.Snapshot {
	sets := make(map[string]snapshot.Set, len(base.Resources)+1)
	for t, byName := range base.Resources {
		sets[t] = snapshot.Set{Resources: byName, Version: base.Version(t)}
	}
	sets[typ] = snapshot.Set{Resources: from.Resources[typ], Version: from.Version(typ)}
	return snapshot.FromSets(base.Revision, sets)
}

// contentCache holds, per manifest scope, the signed content statements of the
// scope's latest snapshots, so a change costs one signature per scope rather than
// one per sidecar, and unchanged content is not signed again. Safe for concurrent
// use; the lock covers map and slice updates only, never a signature: the
// stream that first needs an entry signs it (once) while the others of the scope
// wait on that entry alone.
type contentCache struct {
	priv     ed25519.PrivateKey
	validity time.Duration

	mu     sync.Mutex // guards scopes and every scopeContent
	scopes map[string]*scopeContent
}

type scopeContent struct {
	refs    int             // open watches of the scope; the entry goes with the last
	entries []*contentEntry // most recently added first, at most keepContent
}

// keepContent entries per scope: the latest snapshot and the one before, so
// streams still on the previous generation while meshcache publishes the next do
// not evict each other's signature.
const keepContent = 2

// contentEntry is one scope snapshot's content statement. base, scope, issued and
// from are set at creation; signed and err once resolved.
type contentEntry struct {
	base   *snapshot.Snapshot
	scope  string
	issued time.Time
	from   *contentEntry // same content signed before: its signature is reused
	once   sync.Once
	signed *manifest.Signed
	err    error
}

func newContentCache(priv ed25519.PrivateKey, validity time.Duration) *contentCache {
	return &contentCache{priv: priv, validity: validity, scopes: map[string]*scopeContent{}}
}

func (c *contentCache) acquire(scope string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	sc := c.scopes[scope]
	if sc == nil {
		sc = &scopeContent{}
		c.scopes[scope] = sc
	}
	sc.refs++
}

func (c *contentCache) release(scope string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if sc := c.scopes[scope]; sc != nil {
		if sc.refs--; sc.refs <= 0 {
			delete(c.scopes, scope)
		}
	}
}

// get returns the signed content statement of scope's snapshot base at now: the
// cached one while it is less than half its validity old, reused from an entry
// with the same content, or newly signed.
func (c *contentCache) get(scope string, base *snapshot.Snapshot, now time.Time) (*contentEntry, error) {
	half := c.validity / 2
	fresh := func(e *contentEntry) bool { return now.Before(e.issued.Add(half)) }
	c.mu.Lock()
	sc := c.scopes[scope]
	if sc == nil { // not acquired (a test calling get directly): not kept
		sc = &scopeContent{}
	}
	var e *contentEntry
	for _, x := range sc.entries {
		if x.base == base && fresh(x) {
			e = x
			break
		}
	}
	if e == nil {
		e = &contentEntry{base: base, scope: scope, issued: now}
		for _, x := range sc.entries {
			if fresh(x) && sameContent(base, x.base) {
				e.issued, e.from = x.issued, x
				break
			}
		}
		sc.entries = append([]*contentEntry{e}, sc.entries[:min(len(sc.entries), keepContent-1)]...)
	}
	c.mu.Unlock()
	c.resolve(e)
	return e, e.err
}

func (c *contentCache) resolve(e *contentEntry) {
	e.once.Do(func() {
		if e.from != nil {
			c.resolve(e.from)
			e.signed, e.err, e.from = e.from.signed, e.from.err, nil
			return
		}
		e.signed, e.err = sign.Content(c.priv, e.scope, e.base, e.issued, c.validity)
	})
}
