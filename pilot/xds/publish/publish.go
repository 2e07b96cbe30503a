// Package publish is what pilot adds to meshcache's snapshots before ADS sends
// them: for a Weft sidecar, the check that the sidecar will accept a snapshot
// (its own decoding and compile, run once per scope snapshot), and the signed
// manifest (content statement shared per scope, binding per node and stream,
// saying whether the snapshot is current for the stream). Source implements
// ads.Source; pilot/server wires it between meshcache and ads.
package publish

import (
	"crypto/ed25519"
	"crypto/sha256"
	"crypto/x509"
	"encoding/hex"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hashicorp/go-hclog"

	"github.com/weft-mesh/weft/bootstrap/node"
	"github.com/weft-mesh/weft/certs/manifest"
	"github.com/weft-mesh/weft/pilot/ir"
	"github.com/weft-mesh/weft/pilot/xds/ads"
	"github.com/weft-mesh/weft/pilot/xds/gen"
	"github.com/weft-mesh/weft/pilot/xds/meshcache"
	"github.com/weft-mesh/weft/pilot/xds/sign"
	"github.com/weft-mesh/weft/pilot/xds/snapshot"
)

// Config configures a Source. Logger, Validity and a publisher (Publisher, or
// Key) are required.
type Config struct {
	Logger hclog.Logger
	// Publisher returns the current manifest signer: its Ed25519 key and its
	// certificate chain from the mesh CA (leaf first; pilot/ca Service.Publisher).
	// It is asked at every push, so a renewed certificate or a new key is sent
	// (and signed with) from the next push on without touching sidecars.
	Publisher func() (ed25519.PrivateKey, []*x509.Certificate)
	// Key and Chain are a fixed signer, used when Publisher is nil (a key
	// without a certificate: only sidecars that pin it accept its manifests).
	Key   ed25519.PrivateKey
	Chain []*x509.Certificate
	// Trust, when set, is sent to every Weft sidecar as the SDS Secret ROOTCA
	// (covered by its manifest like everything else); a change is pushed to
	// every stream at once.
	Trust    TrustSource
	Validity time.Duration // manifest validity; re-signed at half of it
	// RollbackEpoch is signed into every manifest content (pilot/store/highwater).
	RollbackEpoch uint64
	Clock         func() time.Time // nil = time.Now
	// ReportGenError shows a proxy's failed (msg != "") or recovered (msg == "")
	// generation in its status.
	ReportGenError func(nodeID string, rev int64, msg string)
	// ReportCurrency, if set, shows in the stream's status the store revision it
	// opened at and whether the snapshot it is sent is current for it.
	ReportCurrency func(nodeID string, streamRev int64, current bool)
}

func (c *Config) check() error {
	switch {
	case c.Logger == nil:
		return errors.New("publish: Config.Logger is required")
	case c.Publisher == nil && len(c.Key) != ed25519.PrivateKeySize:
		return fmt.Errorf("publish: Config.Key: %d bytes, want %d (or Config.Publisher)", len(c.Key), ed25519.PrivateKeySize)
	case c.Validity <= 0:
		return fmt.Errorf("publish: Config.Validity must be > 0, got %v", c.Validity)
	case c.ReportGenError == nil:
		return errors.New("publish: Config.ReportGenError is required")
	}
	if c.Clock == nil {
		c.Clock = time.Now
	}
	return nil
}

// Source adds to meshcache what is per node rather than per scope: the signed
// manifest of a Weft sidecar (its content part shared per scope, its binding per
// node and stream), and the report of a snapshot that failed the sidecar's
// validation to every proxy of its scope.
type Source struct {
	cfg      Config
	cache    *meshcache.Cache // set once by Use, before the first Connect
	checked  checkCache
	contents *contentCache
	rootCAs  rootCACache
	augs     augCache

	mu     sync.Mutex                     // guards scopes, errs and the trust follower
	scopes map[string]map[*watch]struct{} // scope key -> open watches
	errs   map[string]scopeErr            // scope key -> latest generation outcome, when it failed
	// With a TrustSource, one goroutine wakes every stream that gets a
	// manifest when the trust bundle or CRL changes (followTrust), while any
	// is open: trusting counts them, stopTrust ends the follower, trustDone
	// is closed when it has.
	trusting  int
	stopTrust chan struct{}
	trustDone chan struct{}
	// failing is len(errs), stored under mu: a stream with nothing reported
	// skips the lookup (and the lock) while no scope fails.
	failing atomic.Int64
}

type scopeErr struct {
	rev int64
	msg string
}

// New checks cfg. Use must be called before the first Connect.
func New(cfg Config) (*Source, error) {
	if err := cfg.check(); err != nil {
		return nil, err
	}
	return newSource(cfg), nil
}

func newSource(cfg Config) *Source {
	if cfg.Clock == nil {
		cfg.Clock = time.Now
	}
	return &Source{cfg: cfg, scopes: map[string]map[*watch]struct{}{}, errs: map[string]scopeErr{}, checked: checkCache{max: maxCheckEntries, run: checkSidecar},
		contents: newContentCache(cfg.Validity, cfg.RollbackEpoch), rootCAs: rootCACache{src: cfg.Trust}}
}

// rootCA is the current ROOTCA; a failure to build it is logged once per
// Trust version and sidecars keep the one they have.
func (s *Source) rootCA() *rootCA {
	rc := s.rootCAs.get()
	if rc != nil && rc.err != nil {
		s.rootCAs.mu.Lock()
		logged := s.rootCAs.logged == rc
		s.rootCAs.logged = rc
		s.rootCAs.mu.Unlock()
		if !logged {
			s.cfg.Logger.Error("trust bundle not sent: ROOTCA fails sidecar validation", "version", rc.version, "error", rc.err)
		}
	}
	return rc
}

// publisher is the signer to use now.
func (s *Source) publisher() (sign.Publisher, error) {
	p := sign.Publisher{Key: s.cfg.Key, Chain: s.cfg.Chain}
	if s.cfg.Publisher != nil {
		p.Key, p.Chain = s.cfg.Publisher()
	}
	if len(p.Key) != ed25519.PrivateKeySize {
		return sign.Publisher{}, fmt.Errorf("publisher key: %d bytes, want %d", len(p.Key), ed25519.PrivateKeySize)
	}
	return p, nil
}

// chainID names what a manifest's chain says: the leaf's serial ("" without a chain).
func chainID(chain []*x509.Certificate) string {
	if len(chain) == 0 || chain[0] == nil || chain[0].SerialNumber == nil {
		return ""
	}
	return chain[0].SerialNumber.Text(16)
}

// minRecheck bounds how often a stream wakes to look for a renewed publisher
// certificate as its NotAfter nears.
const minRecheck = time.Second

// Use sets the cache streams connect to. meshcache is configured with Generate,
// so it is built after the Source and handed back here.
func (s *Source) Use(c *meshcache.Cache) { s.cache = c }

// scopeKey is the key meshcache generates n's snapshot under, which a
// generation error is recorded by.
func (s *Source) scopeKey(n *node.Node) string {
	if s.cache == nil {
		return meshcache.DefaultScopeKey(n)
	}
	return s.cache.ScopeKey(n)
}

// Generate wraps gen.Proxy: a Weft sidecar's snapshot must also pass the sidecar's
// own decoding and compile (sidecar/xdsresource, sidecar/dataplane), so a push the
// sidecar would NACK is caught here, logged and not sent. meshcache calls it once
// per scope per compiled mesh, so the check is shared like the snapshot.
func (s *Source) Generate(g func(*ir.Mesh, *node.Node) (*snapshot.Snapshot, error)) func(*ir.Mesh, *node.Node) (*snapshot.Snapshot, error) {
	return func(m *ir.Mesh, n *node.Node) (*snapshot.Snapshot, error) {
		snap, err := g(m, n)
		if err == nil && n.Registers() {
			// Checked with the ROOTCA streams add to it (gen does not see it).
			if verr := s.checked.check(withRootCA(snap, s.rootCA())); verr != nil {
				err = fmt.Errorf("snapshot for %s at revision %d fails sidecar validation, not sent: %w", n.ID, m.Revision, verr)
			}
		}
		s.recordGen(s.scopeKey(n), m.Revision, err)
		return snap, err
	}
}

// recordGen remembers a scope's failed generation (or clears it) and wakes the
// scope's streams so each reports it for its proxy.
func (s *Source) recordGen(key string, rev int64, err error) {
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
	s.failing.Store(int64(len(s.errs)))
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

func (s *Source) scopeError(key string) scopeErr {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.errs[key]
}

// Connect implements ads.Source.
func (s *Source) Connect(n *node.Node) (ads.Watch, error) {
	if s.cache == nil {
		return nil, errors.New("publish: Connect before Use")
	}
	p, err := s.cache.Connect(n)
	if err != nil {
		return nil, err
	}
	w := &watch{s: s, p: p, n: n, key: s.scopeKey(n)}
	if n.Registers() {
		w.scope = manifestScope(n)
		s.contents.acquire(w.scope)
	}
	s.mu.Lock()
	if s.scopes[w.key] == nil {
		s.scopes[w.key] = map[*watch]struct{}{}
	}
	s.scopes[w.key][w] = struct{}{}
	if s.cfg.Trust != nil && w.scope != "" {
		if s.trusting++; s.trusting == 1 {
			s.stopTrust, s.trustDone = make(chan struct{}), make(chan struct{})
			go s.followTrust(s.stopTrust, s.trustDone)
		}
	}
	s.mu.Unlock()
	w.poke() // the first Snapshot call reports a generation error that predates the stream
	return w, nil
}

// followTrust wakes every stream that gets a manifest whenever the trust
// bundle or CRL changes, so every sidecar gets the new ROOTCA at once, until
// stop is closed. The next change's channel is taken before the streams are
// woken: a change while they are is not missed.
func (s *Source) followTrust(stop <-chan struct{}, done chan<- struct{}) {
	defer close(done)
	changed := s.cfg.Trust.TrustChanged()
	for {
		select {
		case <-changed:
			changed = s.cfg.Trust.TrustChanged()
			s.mu.Lock()
			var ws []*watch
			for _, scope := range s.scopes {
				for w := range scope {
					if w.scope != "" {
						ws = append(ws, w)
					}
				}
			}
			s.mu.Unlock()
			for _, w := range ws {
				w.poke()
			}
		case <-stop:
			return
		}
	}
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
// It wakes its stream through meshcache's channel (meshcache.Proxy.Wake) when a
// re-sign is due, a generation failed, or the trust bundle changed.
type watch struct {
	s     *Source
	p     *meshcache.Proxy
	n     *node.Node
	key   string
	scope string // manifest scope; "" for a node that gets no manifest

	mu       sync.Mutex // guards the fields below (Snapshot runs on the stream's owner goroutine, timers elsewhere)
	base     *snapshot.Snapshot
	content  *manifest.Signed   // content part in signed
	binding  *manifest.Signed   // this node's binding, signed at the stream's first snapshot, at half its validity and when current turns true
	bindAt   time.Time          // binding's issue time
	bindCur  bool               // what binding says of the snapshot's currency
	chain    string             // chainID of the publisher chain in signed
	rawBase  *snapshot.Snapshot // meshcache's offer aug was built from
	rootCA   *rootCA            // the ROOTCA aug carries
	aug      *snapshot.Snapshot // rawBase with rootCA
	signed   *snapshot.Snapshot
	timer    *time.Timer
	due      time.Time        // when timer fires (zero: not armed)
	bindPart sign.BindingPart // binding, encoded
	// The chain of the last push, by its leaf and length: its chainID and
	// manifest part (chainSet once computed).
	lastLeaf      *x509.Certificate
	lastChainLen  int
	lastChain     string
	lastChainPart sign.ChainPart
	chainSet      bool
	reported      string // generation error last reported to status
	offered       int    // currency last reported: 0 none, 1 not current, 2 current
	closed        bool
}

func (w *watch) poke() { w.p.Wake() }

// Changed implements ads.Watch.
func (w *watch) Changed() <-chan struct{} { return w.p.Changed() }

// Snapshot implements ads.Watch: the snapshot meshcache offers the stream (nil
// while it waits for one current for the stream), with this node's signed
// manifest added when the node is a Weft sidecar. The manifest joins the scope's
// shared content statement (signed once per scope snapshot, again only when the
// content changes or at half its validity) with this node's binding for the
// stream (signed at the first Snapshot, again at half its validity and when the
// offer turns current). The binding carries the store revision the stream opened
// at and whether the offer is current, so a sidecar that was sent an older
// snapshot after the wait timed out does not report ready on it. It runs on the
// stream's goroutine, so the per-node work is spread over the streams.
func (w *watch) Snapshot() *snapshot.Snapshot {
	w.reportGenError()
	base, current := w.p.Offer()
	if base != nil {
		w.reportCurrency(current)
	}
	if base == nil || w.scope == "" {
		return base
	}
	base = w.withRootCA(base)
	now := w.s.cfg.Clock()
	half := w.s.cfg.Validity / 2
	pub, err := w.s.publisher()
	var ce *contentEntry
	if err == nil {
		ce, err = w.s.contents.get(w.scope, base, now, pub.Key)
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	if err != nil {
		// Signing only fails on a programming error (bad key, nil snapshot):
		// keep what the proxy has.
		w.s.cfg.Logger.Error("signing manifest content failed; proxy keeps its snapshot", "node", w.n.ID, "revision", base.Revision, "error", err)
		return w.signed
	}
	chain, err := w.chainLocked(pub.Chain)
	if err != nil {
		w.s.cfg.Logger.Error("assembling manifest failed; proxy keeps its snapshot", "node", w.n.ID, "revision", base.Revision, "error", err)
		return w.signed
	}
	if w.binding == nil || !now.Before(w.bindAt.Add(half)) || current != w.bindCur || w.binding.KeyID != ce.signed.KeyID {
		stream := sign.Stream{Current: current, Revision: w.p.StoreRevision()}
		b, err := sign.Binding(pub.Key, w.n.ID, w.scope, stream, now, w.s.cfg.Validity)
		var bp sign.BindingPart
		if err == nil {
			bp, err = sign.EncodeBinding(b)
		}
		if err != nil {
			w.s.cfg.Logger.Error("signing manifest binding failed; proxy keeps its snapshot", "node", w.n.ID, "error", err)
			return w.signed
		}
		w.bindPart = bp
		if !current {
			w.s.cfg.Logger.Warn("sending a snapshot not current for the stream, marked so in its manifest",
				"node", w.n.ID, "revision", base.Revision, "store_revision", stream.Revision)
		}
		w.binding, w.bindAt, w.bindCur = b, now, current
	} else if ce.signed == w.content && chain == w.chain {
		if base != w.base {
			// A new revision (or a recompile) with the same content: the
			// signature still covers it, so it is not signed and sent again.
			w.base, w.signed = base, withSet(base, snapshot.ManifestType, snapshot.Set{Resources: w.signed.Resources[snapshot.ManifestType], Version: w.signed.Version(snapshot.ManifestType)})
		}
		w.armLocked(now, ce.issued, pub.Chain)
		return w.signed
	}
	// The content and chain parts are encoded once for every sidecar of the
	// scope, the binding once per signature: a manifest per sidecar is one
	// concatenation (sign.Join).
	r, err := sign.Join(ce.part, w.bindPart, w.lastChainPart)
	if err != nil {
		w.s.cfg.Logger.Error("assembling manifest failed; proxy keeps its snapshot", "node", w.n.ID, "revision", base.Revision, "error", err)
		return w.signed
	}
	w.base, w.content, w.chain = base, ce.signed, chain
	w.signed = withSet(base, snapshot.ManifestType, snapshot.NewSet(map[string]snapshot.Resource{r.Name: r}))
	w.armLocked(now, ce.issued, pub.Chain)
	return w.signed
}

// chainLocked is chainID(chain), with chain's manifest part in
// lastChainPart, computed once per leaf certificate (not per push).
func (w *watch) chainLocked(chain []*x509.Certificate) (string, error) {
	var leaf *x509.Certificate
	if len(chain) > 0 {
		leaf = chain[0]
	}
	if !w.chainSet || leaf != w.lastLeaf || len(chain) != w.lastChainLen {
		p, err := sign.EncodeChain(chain...)
		if err != nil {
			return "", err
		}
		w.lastLeaf, w.lastChainLen, w.lastChain, w.lastChainPart, w.chainSet = leaf, len(chain), chainID(chain), p, true
	}
	return w.lastChain, nil
}

// withRootCA adds the current ROOTCA to meshcache's offer raw: the same
// snapshot value while neither changes, so the content statement's cache
// recognises it.
func (w *watch) withRootCA(raw *snapshot.Snapshot) *snapshot.Snapshot {
	rc := w.s.rootCA()
	if rc != nil && rc.err != nil {
		rc = w.rootCA // keep sending the last good one
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	if raw != w.rawBase || rc != w.rootCA || w.aug == nil {
		w.rawBase, w.rootCA, w.aug = raw, rc, w.s.augs.get(raw, rc)
	}
	return w.aug
}

// augCache shares withRootCA's result between the streams of a scope (they
// are offered the same snapshot): one copy per scope snapshot rather than per
// stream, and the same value, which the content cache recognises at once.
type augCache struct {
	mu sync.Mutex // guards m
	m  map[augKey]*snapshot.Snapshot
}

type augKey struct {
	raw *snapshot.Snapshot
	rc  *rootCA
}

// maxAugEntries bounds augCache; it restarts empty when full (entries pin
// snapshots; a push needs one per scope).
const maxAugEntries = 1024

func (c *augCache) get(raw *snapshot.Snapshot, rc *rootCA) *snapshot.Snapshot {
	k := augKey{raw, rc}
	c.mu.Lock()
	defer c.mu.Unlock()
	if s, ok := c.m[k]; ok {
		return s
	}
	if c.m == nil || len(c.m) >= maxAugEntries {
		c.m = map[augKey]*snapshot.Snapshot{}
	}
	s := withRootCA(raw, rc)
	c.m[k] = s
	return s
}

// armLocked sets the stream's wake-up at the earlier half-life of the two parts
// (the next Snapshot re-signs whichever is due) and, with a publisher
// certificate, halfway to its NotAfter (at least minRecheck away), so the
// renewed one pilot/ca issues is sent before sidecars would refuse the old.
func (w *watch) armLocked(now, contentIssued time.Time, chain []*x509.Certificate) {
	half := w.s.cfg.Validity / 2
	due := contentIssued
	if w.bindAt.Before(due) {
		due = w.bindAt
	}
	due = due.Add(half)
	if len(chain) > 0 {
		if at := now.Add(max(chain[0].NotAfter.Sub(now)/2, minRecheck)); at.Before(due) {
			due = at
		}
	}
	if w.closed {
		return
	}
	// A timer that fires before due only pokes the stream, whose Snapshot
	// arms it again: so a due later than the armed one (every push moves it
	// later) leaves the timer as it is instead of re-arming 10,000 of them.
	if w.timer != nil && !w.due.IsZero() && !due.Before(w.due) {
		return
	}
	w.due = due
	if w.timer == nil {
		w.timer = time.AfterFunc(max(due.Sub(now), 0), w.fire)
		return
	}
	w.timer.Reset(max(due.Sub(now), 0))
}

// fire is the timer's: the armed due has passed, so the next Snapshot arms it
// afresh, then the stream is woken to re-sign what is due.
func (w *watch) fire() {
	w.mu.Lock()
	w.due = time.Time{}
	w.mu.Unlock()
	w.poke()
}

// reportCurrency shows in status whether what the stream is offered is current,
// once per change.
func (w *watch) reportCurrency(current bool) {
	v := 1
	if current {
		v = 2
	}
	w.mu.Lock()
	changed := v != w.offered
	w.offered = v
	w.mu.Unlock()
	if changed && w.s.cfg.ReportCurrency != nil {
		w.s.cfg.ReportCurrency(w.n.ID, w.p.StoreRevision(), current)
	}
}

// reportGenError shows (or clears) a failed generation of this proxy's scope in
// its status.
func (w *watch) reportGenError() {
	if w.s.failing.Load() == 0 {
		w.mu.Lock()
		none := w.reported == ""
		w.mu.Unlock()
		if none {
			return
		}
	}
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
	var stopTrust, trustDone chan struct{}
	if w.s.cfg.Trust != nil && w.scope != "" {
		if w.s.trusting--; w.s.trusting == 0 {
			stopTrust, trustDone = w.s.stopTrust, w.s.trustDone
		}
	}
	w.s.mu.Unlock()
	if stopTrust != nil {
		close(stopTrust)
		<-trustDone // it takes s.mu, which is not held here
	}
	if w.scope != "" {
		w.s.contents.release(w.scope)
	}
	w.mu.Lock()
	w.closed = true
	if w.timer != nil {
		w.timer.Stop()
	}
	w.mu.Unlock()
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

// withSet returns base (its revision and sets) plus set as type typ.
func withSet(base *snapshot.Snapshot, typ string, set snapshot.Set) *snapshot.Snapshot {
	sets := make(map[string]snapshot.Set, len(base.Resources)+1)
	for t, byName := range base.Resources {
		sets[t] = snapshot.Set{Resources: byName, Version: base.Version(t)}
	}
	sets[typ] = set
	return snapshot.FromSets(base.Revision, sets)
}
