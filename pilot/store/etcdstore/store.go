package etcdstore

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/hashicorp/go-hclog"
	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/weft-mesh/weft/pilot/resource"
	"github.com/weft-mesh/weft/pilot/store"
	"github.com/weft-mesh/weft/pilot/store/watchhub"
)

// Defaults of Config's zero values. The etcd-side ones must not exceed what the
// etcd servers are run with (--max-txn-ops, --max-request-bytes).
const (
	DefaultPrefix          = "/weft/"
	DefaultDialTimeout     = 5 * time.Second
	DefaultRequestTimeout  = 10 * time.Second
	DefaultApplyTimeout    = 60 * time.Second
	DefaultWatchBuffer     = 1024       // revisions pending per watcher before it is cut off
	DefaultMaxTxnOps       = 128        // etcd's --max-txn-ops default
	DefaultMaxRequestBytes = 1536 << 10 // etcd's --max-request-bytes default (1.5 MiB)
	DefaultInlineBytes     = 512 << 10  // a change set up to this is written in its commit
	DefaultChunkBytes      = 1 << 20    // larger ones are written in chunks of this
	DefaultChunkLeaseTTL   = 60 * time.Second
)

// RequestOverhead is what a request adds to the value it carries (key, framing,
// the other operations of a commit); InlineBytes and ChunkBytes must leave it
// free below MaxRequestBytes.
const RequestOverhead = 8 << 10

// MaxCommitAttempts bounds how often one Apply plans again after another replica
// committed first; past it the Apply fails (transient: retry it).
const MaxCommitAttempts = 32

// catchUpRecords is how many log records one read fetches (watch catch-up,
// History, start): a bound on one response, not on what is read in all.
const catchUpRecords = 64

// Config configures Open. Endpoints is required; every other zero value means
// the default above.
type Config struct {
	Endpoints []string
	// TLS secures the client connections (see TLSConfig); nil is plaintext.
	TLS *tls.Config
	// Prefix is prepended to every key (one Weft store per prefix).
	Prefix string
	Logger hclog.Logger
	// DialTimeout bounds Open's first connection to etcd.
	DialTimeout time.Duration
	// RequestTimeout bounds each etcd request the store makes on its own (log
	// follow, catch-up reads) and how long a read waits for this replica to
	// catch up with the head; callers' contexts bound their own calls.
	RequestTimeout time.Duration
	// ApplyTimeout bounds one Apply in all (staging, commits, retries, an
	// unknown outcome read back), whatever the caller's context: an etcd
	// without quorum fails applies instead of holding them.
	ApplyTimeout time.Duration
	WatchBuffer  int
	// MaxTxnOps is etcd's --max-txn-ops: a commit holds at most MaxTxnOps-3 chunks.
	MaxTxnOps int
	// MaxRequestBytes is etcd's --max-request-bytes.
	MaxRequestBytes int
	InlineBytes     int
	ChunkBytes      int
	// ChunkLeaseTTL is how long the chunks of a large apply live before their
	// commit; staging and commit must finish within it.
	ChunkLeaseTTL time.Duration
}

func (c *Config) defaults() {
	if c.Prefix == "" {
		c.Prefix = DefaultPrefix
	}
	if c.Logger == nil {
		c.Logger = hclog.NewNullLogger()
	}
	setDefault := func(v *int, d int) {
		if *v == 0 {
			*v = d
		}
	}
	setDefault(&c.WatchBuffer, DefaultWatchBuffer)
	setDefault(&c.MaxTxnOps, DefaultMaxTxnOps)
	setDefault(&c.MaxRequestBytes, DefaultMaxRequestBytes)
	setDefault(&c.InlineBytes, DefaultInlineBytes)
	setDefault(&c.ChunkBytes, DefaultChunkBytes)
	setDur := func(v *time.Duration, d time.Duration) {
		if *v == 0 {
			*v = d
		}
	}
	setDur(&c.DialTimeout, DefaultDialTimeout)
	setDur(&c.RequestTimeout, DefaultRequestTimeout)
	setDur(&c.ApplyTimeout, DefaultApplyTimeout)
	setDur(&c.ChunkLeaseTTL, DefaultChunkLeaseTTL)
}

func (c *Config) check() error {
	switch {
	case len(c.Endpoints) == 0:
		return errors.New("etcdstore: no endpoints")
	case !strings.HasSuffix(c.Prefix, "/"):
		return fmt.Errorf("etcdstore: prefix %q must end with /", c.Prefix)
	case c.WatchBuffer < 1:
		return fmt.Errorf("etcdstore: watch buffer must be >= 1, got %d", c.WatchBuffer)
	case c.MaxTxnOps < 4:
		return fmt.Errorf("etcdstore: max txn ops must be >= 4 (a chunked commit has 3 + chunks), got %d", c.MaxTxnOps)
	case c.InlineBytes < 1 || c.InlineBytes+RequestOverhead > c.MaxRequestBytes:
		return fmt.Errorf("etcdstore: inline bytes %d must be in 1..max request bytes %d - %d", c.InlineBytes, c.MaxRequestBytes, RequestOverhead)
	case c.ChunkBytes < 1 || c.ChunkBytes+RequestOverhead > c.MaxRequestBytes:
		return fmt.Errorf("etcdstore: chunk bytes %d must be in 1..max request bytes %d - %d", c.ChunkBytes, c.MaxRequestBytes, RequestOverhead)
	case c.DialTimeout < 0 || c.RequestTimeout < 0 || c.ApplyTimeout < 0:
		return errors.New("etcdstore: timeouts must not be negative")
	case c.ChunkLeaseTTL < time.Second:
		return fmt.Errorf("etcdstore: chunk lease TTL must be >= 1s, got %s", c.ChunkLeaseTTL)
	}
	for _, e := range c.Endpoints {
		if e == "" {
			return errors.New("etcdstore: empty endpoint")
		}
	}
	return nil
}

// TLSConfig builds the client TLS configuration from PEM files: caFile (the
// roots that sign the etcd servers' certificates; empty: the system roots) and,
// for client-certificate authentication, certFile and keyFile (both or neither).
func TLSConfig(caFile, certFile, keyFile string) (*tls.Config, error) {
	cfg := &tls.Config{MinVersion: tls.VersionTLS12}
	if caFile != "" {
		pem, err := os.ReadFile(caFile)
		if err != nil {
			return nil, fmt.Errorf("etcd CA: %w", err)
		}
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM(pem) {
			return nil, fmt.Errorf("etcd CA %s: no PEM certificate in it", caFile)
		}
		cfg.RootCAs = pool
	}
	if (certFile == "") != (keyFile == "") {
		return nil, errors.New("etcd client certificate and key must be given together")
	}
	if certFile != "" {
		cert, err := tls.LoadX509KeyPair(certFile, keyFile)
		if err != nil {
			return nil, fmt.Errorf("etcd client certificate %s / key %s: %w", certFile, keyFile, err)
		}
		cfg.Certificates = []tls.Certificate{cert}
	}
	return cfg, nil
}

// Store is the etcd-backed store.Store; it also implements store.Compactor and
// store.WatchBufferer.
type Store struct {
	cfg  Config
	cli  *clientv3.Client
	k    keys
	log  hclog.Logger
	ctx  context.Context // of the follow loop; canceled by Close
	stop context.CancelFunc
	id   string // store.Identifier: made by the first Open of this prefix
	// beforeCommit, set by tests only, runs between staging and the commit.
	beforeCommit func(id string)
	done         chan struct{} // closed by Close; stops watchers
	wg           sync.WaitGroup

	// applyMu serialises this replica's writers (Apply, Compact); across
	// replicas the compare on l/head does.
	applyMu sync.Mutex

	stateMu   sync.RWMutex // guards the fields below; never held across etcd I/O
	objects   store.Objects
	rev       store.Revision
	compacted store.Revision
	advanced  chan struct{} // closed (and replaced) whenever rev moves
	hub       *watchhub.Hub // the live watchers (its state guarded by stateMu)
	closed    bool
}

var (
	_ store.Store         = (*Store)(nil)
	_ store.Compactor     = (*Store)(nil)
	_ store.WatchBufferer = (*Store)(nil)
	_ store.Identifier    = (*Store)(nil)
	_ store.HistoryPager  = (*Store)(nil)
)

// Open connects to etcd, loads the store under cfg.Prefix (snapshot and log)
// and starts following the log.
func Open(ctx context.Context, cfg Config) (*Store, error) {
	cfg.defaults()
	if err := cfg.check(); err != nil {
		return nil, err
	}
	cli, err := clientv3.New(clientv3.Config{
		Endpoints: cfg.Endpoints, TLS: cfg.TLS, DialTimeout: cfg.DialTimeout, Context: ctx,
		Logger: zap.NewNop(), MaxCallSendMsgSize: cfg.MaxRequestBytes,
		// Keepalives find a dead member (kill -9, partition) within seconds.
		DialKeepAliveTime: 2 * time.Second, DialKeepAliveTimeout: 2 * time.Second,
	})
	if err != nil {
		return nil, fmt.Errorf("etcdstore: connect to %s: %w", strings.Join(cfg.Endpoints, ","), err)
	}
	bg, stop := context.WithCancel(context.Background())
	s := &Store{
		cfg: cfg, cli: cli, k: newKeys(cfg.Prefix), log: cfg.Logger, ctx: bg, stop: stop,
		done: make(chan struct{}), objects: make(store.Objects),
		advanced: make(chan struct{}),
	}
	s.hub = watchhub.New(&s.stateMu, cfg.WatchBuffer, s.done, s.head, s.readHistory)
	lctx, cancel := context.WithTimeout(ctx, cfg.DialTimeout+cfg.RequestTimeout)
	s.id, err = s.identity(lctx)
	var at int64
	if err == nil {
		at, err = s.load(lctx)
	}
	cancel()
	if err != nil {
		stop()
		cli.Close()
		return nil, fmt.Errorf("etcdstore: open %s at %s: %w", cfg.Prefix, strings.Join(cfg.Endpoints, ","), err)
	}
	s.log.Info("store opened", "endpoints", strings.Join(cfg.Endpoints, ","), "prefix", cfg.Prefix,
		"revision", s.rev, "objects", len(s.objects), "compacted_before", s.compacted)
	s.wg.Add(1)
	go s.follow(at)
	return s, nil
}

// identity reads the store's id, making it if this is the prefix's first Open.
func (s *Store) identity(ctx context.Context) (string, error) {
	resp, err := s.cli.Txn(ctx).If(clientv3.Compare(clientv3.CreateRevision(s.k.id), "=", 0)).
		Then(clientv3.OpPut(s.k.id, newID())).Else(clientv3.OpGet(s.k.id)).Commit()
	if err != nil {
		return "", fmt.Errorf("store id: %w", err)
	}
	if !resp.Succeeded {
		return string(resp.Responses[0].GetResponseRange().Kvs[0].Value), nil
	}
	resp2, err := s.cli.Get(ctx, s.k.id)
	if err != nil || len(resp2.Kvs) != 1 {
		return "", fmt.Errorf("store id: read back: %v", err)
	}
	return string(resp2.Kvs[0].Value), nil
}

// ID is the store's identity (store.Identifier): made when the prefix was first
// opened, the same for every replica.
func (s *Store) ID() string { return s.id }

// state is what load reads: objects at rev.
type state struct {
	objects   store.Objects
	rev       store.Revision
	compacted store.Revision
}

// read reads everything load needs at one etcd revision and returns it with
// that etcd revision.
func (s *Store) read(ctx context.Context) (state, int64, error) {
	resp, err := s.cli.Txn(ctx).Then(clientv3.OpGet(s.k.head), clientv3.OpGet(s.k.compacted), clientv3.OpGet(s.k.manifest)).Commit()
	if err != nil {
		return state{}, 0, fmt.Errorf("read head: %w", err)
	}
	at := resp.Header.Revision
	st := state{objects: make(store.Objects)}
	get := func(i int) []byte {
		if kvs := resp.Responses[i].GetResponseRange().Kvs; len(kvs) == 1 {
			return kvs[0].Value
		}
		return nil
	}
	head, comp, man := get(0), get(1), get(2)
	if head != nil {
		if st.rev, err = parseRevision(s.k.head, head); err != nil {
			return state{}, 0, err
		}
	}
	if comp != nil {
		if st.compacted, err = parseRevision(s.k.compacted, comp); err != nil {
			return state{}, 0, err
		}
	}
	base := store.Revision(0)
	if man != nil {
		var m manifest
		if err := json.Unmarshal(man, &m); err != nil {
			return state{}, 0, fmt.Errorf("%s: %w", s.k.manifest, err)
		}
		objs, err := s.readSnapshot(ctx, m, at)
		if err != nil {
			return state{}, 0, err
		}
		for _, o := range objs {
			c, err := store.ContentOf(o)
			if err != nil {
				return state{}, 0, err
			}
			st.objects[store.ObjectKey(o.Key())] = store.Entry{Obj: o, Content: c}
		}
		base = m.Rev
	}
	if base > st.rev {
		return state{}, 0, fmt.Errorf("snapshot at revision %d is past the head %d", base, st.rev)
	}
	err = s.readRecords(ctx, base, st.rev, at, func(rev store.Revision, evs []store.Event) error {
		applyEvents(st.objects, evs)
		return nil
	})
	if err != nil {
		return state{}, 0, err
	}
	return st, at, nil
}

// load reads the store and installs it as this replica's state.
func (s *Store) load(ctx context.Context) (int64, error) {
	st, at, err := s.read(ctx)
	if err != nil {
		return 0, err
	}
	s.stateMu.Lock()
	s.objects, s.rev, s.compacted = st.objects, st.rev, st.compacted
	s.stateMu.Unlock()
	return at, nil
}

func (s *Store) readSnapshot(ctx context.Context, m manifest, at int64) ([]*resource.Object, error) {
	what := fmt.Sprintf("snapshot at revision %d", m.Rev)
	resp, err := s.cli.Get(ctx, s.k.snapshotDir(m.Rev), clientv3.WithPrefix(), clientv3.WithRev(at))
	if err != nil {
		return nil, fmt.Errorf("read %s: %w", what, err)
	}
	chunks := make([][]byte, len(resp.Kvs))
	for i, kv := range resp.Kvs {
		chunks[i] = kv.Value
	}
	data, err := joinChunks(what, chunks, m.Chunks, m.Bytes, m.SHA256)
	if err != nil {
		return nil, err
	}
	var raw []json.RawMessage
	if err := json.Unmarshal(data, &raw); err != nil {
		return nil, fmt.Errorf("%s: %w", what, err)
	}
	out := make([]*resource.Object, len(raw))
	for i, r := range raw {
		if out[i], err = store.DecodeObject(r); err != nil {
			return nil, fmt.Errorf("%s: %w", what, err)
		}
	}
	return out, nil
}

// applyEvents applies one revision's events to a state map.
func applyEvents(objects store.Objects, evs []store.Event) {
	for _, ev := range evs {
		k := store.ObjectKey(ev.Object.Key())
		if ev.Op == store.OpDelete {
			delete(objects, k)
			continue
		}
		c, err := store.ContentOf(ev.Object)
		if err != nil { // decoded from JSON, so it encodes again
			panic(err)
		}
		objects[k] = store.Entry{Obj: ev.Object, Content: c}
	}
}

// readRecords reads the records after+1..upTo as etcd had them at revision at
// (0: now), in pages, and calls fn with each revision's events in order.
func (s *Store) readRecords(ctx context.Context, after, upTo store.Revision, at int64, fn func(store.Revision, []store.Event) error) error {
	for after < upTo {
		end := min(upTo, after+catchUpRecords)
		opts := []clientv3.OpOption{clientv3.WithRange(s.k.record(end + 1))}
		if at != 0 {
			opts = append(opts, clientv3.WithRev(at))
		}
		resp, err := s.cli.Get(ctx, s.k.record(after+1), opts...)
		if err != nil {
			return fmt.Errorf("read log %d..%d: %w", after+1, end, err)
		}
		if at == 0 {
			at = resp.Header.Revision // later pages at the same etcd revision
		}
		for _, kv := range resp.Kvs {
			rev, ok := s.k.recordRevision(string(kv.Key))
			if !ok || rev != after+1 {
				return fmt.Errorf("log: record %q where revision %d was expected", kv.Key, after+1)
			}
			evs, err := s.decodeRecord(ctx, rev, kv.Value, at)
			if err != nil {
				return err
			}
			if err := fn(rev, evs); err != nil {
				return err
			}
			after = rev
		}
		if after < end {
			return fmt.Errorf("log: revision %d missing: %w", after+1, errLogGap)
		}
	}
	return nil
}

// errLogGap: a record the head says exists is not in the log (compacted away
// while it was read, or damage).
var errLogGap = errors.New("gap in the log")

// decodeRecord decodes one record, reading its chunks at etcd revision at.
func (s *Store) decodeRecord(ctx context.Context, rev store.Revision, data []byte, at int64) ([]store.Event, error) {
	var rec record
	if err := json.Unmarshal(data, &rec); err != nil {
		return nil, fmt.Errorf("record %d: %w", rev, err)
	}
	evData := []byte(rec.Events)
	if rec.Chunks > 0 {
		resp, err := s.cli.Get(ctx, s.k.chunkDir(rec.ID), clientv3.WithPrefix(), clientv3.WithRev(at))
		if err != nil {
			return nil, fmt.Errorf("record %d: read chunks: %w", rev, err)
		}
		chunks := make([][]byte, len(resp.Kvs))
		for i, kv := range resp.Kvs {
			chunks[i] = kv.Value
		}
		if evData, err = joinChunks(fmt.Sprintf("record %d", rev), chunks, rec.Chunks, rec.Bytes, rec.SHA256); err != nil {
			return nil, err
		}
	}
	return decodeEvents(rev, rec.Time, evData)
}

// WatchBuffer reports the per-watcher limit of pending revisions.
func (s *Store) WatchBuffer() int { return s.cfg.WatchBuffer }

// sync waits (at most RequestTimeout) until this replica's state has caught up
// with the head etcd holds now (a linearizable read), so reads after an Apply
// on any replica see it.
func (s *Store) sync(ctx context.Context) error {
	if s.isClosed() {
		return store.ErrClosed
	}
	ctx, cancel := context.WithTimeout(ctx, s.cfg.RequestTimeout)
	defer cancel()
	resp, err := s.cli.Get(ctx, s.k.head)
	if err != nil {
		if s.isClosed() {
			return store.ErrClosed
		}
		return fmt.Errorf("etcdstore: read head: %w", err)
	}
	var head store.Revision
	if len(resp.Kvs) == 1 {
		if head, err = parseRevision(s.k.head, resp.Kvs[0].Value); err != nil {
			return fmt.Errorf("etcdstore: %w", err)
		}
	}
	return s.waitRev(ctx, head)
}

// waitRev waits until the local state reaches rev.
func (s *Store) waitRev(ctx context.Context, rev store.Revision) error {
	for {
		s.stateMu.RLock()
		cur, ch, closed := s.rev, s.advanced, s.closed
		s.stateMu.RUnlock()
		if closed {
			return store.ErrClosed
		}
		if cur >= rev {
			return nil
		}
		select {
		case <-ch:
		case <-s.done:
			return store.ErrClosed
		case <-ctx.Done():
			return fmt.Errorf("etcdstore: catching up from revision %d to %d: %w", cur, rev, ctx.Err())
		}
	}
}

func (s *Store) isClosed() bool {
	s.stateMu.RLock()
	defer s.stateMu.RUnlock()
	return s.closed
}

// Get returns the current object or store.ErrNotFound.
func (s *Store) Get(ctx context.Context, key resource.Key) (*resource.Object, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	if err := s.sync(ctx); err != nil {
		return nil, err
	}
	s.stateMu.RLock()
	defer s.stateMu.RUnlock()
	if s.closed {
		return nil, store.ErrClosed
	}
	return s.objects.Get(key)
}

// List returns current objects of kind (any when empty) in namespace (any when
// empty), sorted by key, with the revision read at.
func (s *Store) List(ctx context.Context, kind, namespace string) ([]*resource.Object, store.Revision, error) {
	if err := ctx.Err(); err != nil {
		return nil, 0, err
	}
	kind, err := store.ListKind(kind)
	if err != nil {
		return nil, 0, err
	}
	if err := s.sync(ctx); err != nil {
		return nil, 0, err
	}
	s.stateMu.RLock()
	defer s.stateMu.RUnlock()
	if s.closed {
		return nil, 0, store.ErrClosed
	}
	return s.objects.List(kind, namespace), s.rev, nil
}

// Revision returns the current store revision (the head, read linearizably).
func (s *Store) Revision(ctx context.Context) (store.Revision, error) {
	if err := ctx.Err(); err != nil {
		return 0, err
	}
	if err := s.sync(ctx); err != nil {
		return 0, err
	}
	s.stateMu.RLock()
	defer s.stateMu.RUnlock()
	if s.closed {
		return 0, store.ErrClosed
	}
	return s.rev, nil
}

// plan is one Apply planned against the local state at base.
type plan struct {
	base    store.Revision
	res     store.ApplyResult
	events  []store.Event
	encoded []byte // the events as the record's JSON array
}

// planApply checks preconditions and works out every write against the local
// state; it holds stateMu for reading only (no I/O).
func (s *Store) planApply(muts []store.Mutation) (plan, error) {
	s.stateMu.RLock()
	defer s.stateMu.RUnlock()
	if s.closed {
		return plan{}, store.ErrClosed
	}
	base := s.rev
	// Every precondition first, so a conflict anywhere in a bulk apply writes nothing.
	for _, m := range muts {
		key := m.Object.Key()
		e, exists := s.objects[store.ObjectKey(key)]
		var actual int64
		if exists {
			actual = e.Obj.Metadata.Generation
		}
		if m.IfMatch != nil && *m.IfMatch != actual {
			return plan{}, &store.ConflictError{Key: key, Expected: *m.IfMatch, Actual: actual}
		}
		if m.Op == store.OpDelete && !exists {
			return plan{}, fmt.Errorf("delete %s: %w", key, store.ErrNotFound)
		}
	}
	next := base + 1
	p := plan{base: base, res: store.ApplyResult{Revision: base, Objects: make([]*resource.Object, len(muts))}}
	wire := make([]recEvent, 0, len(muts))
	total := 0
	for i, m := range muts {
		ev, data, unchanged, err := planOne(m, s.objects, next)
		if err != nil {
			return plan{}, err
		}
		if unchanged != nil {
			p.res.Objects[i] = unchanged
			continue
		}
		if total += len(data); total > store.MaxApplyBytes {
			return plan{}, fmt.Errorf("%w: apply encodes to more than %d bytes (at %s)", store.ErrInvalid, store.MaxApplyBytes, m.Object.Key())
		}
		p.res.Objects[i] = ev.Object
		p.events = append(p.events, ev)
		wire = append(wire, recEvent{Op: ev.Op, Object: data})
	}
	if len(p.events) == 0 {
		return p, nil
	}
	enc, err := json.Marshal(wire)
	if err != nil {
		return plan{}, fmt.Errorf("etcdstore: encode change set: %w", err)
	}
	p.encoded = enc
	p.res.Revision, p.res.Changed = next, true
	return p, nil
}

// planOne works out one mutation's event (and its encoded object), or returns
// the stored object when a PUT changes nothing.
func planOne(m store.Mutation, objects store.Objects, next store.Revision) (store.Event, []byte, *resource.Object, error) {
	key := m.Object.Key()
	old, exists := objects[store.ObjectKey(key)]
	if m.Op == store.OpDelete {
		last := *old.Obj
		last.Metadata.Revision = int64(next)
		data, err := json.Marshal(&last)
		if err != nil {
			return store.Event{}, nil, nil, fmt.Errorf("%s: encode: %w", key, err)
		}
		return store.Event{Revision: next, Op: store.OpDelete, Object: &last}, data, nil, nil
	}
	content, err := store.ContentOf(m.Object)
	if err != nil {
		return store.Event{}, nil, nil, fmt.Errorf("%w: %w", store.ErrInvalid, err)
	}
	if exists && bytes.Equal(content, old.Content) {
		return store.Event{}, nil, old.Obj, nil
	}
	gen := int64(1) // a re-created object starts again at 1, as in Kubernetes
	if exists {
		gen = old.Obj.Metadata.Generation + 1
	}
	apiVersion := m.Object.APIVersion
	if apiVersion == "" {
		apiVersion = resource.APIVersion
	}
	md := m.Object.Metadata
	md.Generation, md.Revision = gen, int64(next)
	data, err := json.Marshal(&resource.Object{APIVersion: apiVersion, Kind: m.Object.Kind, Metadata: md, Spec: m.Object.Spec, Status: m.Object.Status})
	if err != nil {
		return store.Event{}, nil, nil, fmt.Errorf("%w: %s: encode: %w", store.ErrInvalid, key, err)
	}
	if len(data) > store.MaxObjectBytes {
		return store.Event{}, nil, nil, fmt.Errorf("%w: %s: encoded object is %d bytes, limit is %d", store.ErrInvalid, key, len(data), store.MaxObjectBytes)
	}
	// The stored object shares nothing with the caller's and is exactly what
	// every replica decodes from the log.
	obj, err := store.DecodeObject(data)
	if err != nil {
		return store.Event{}, nil, nil, fmt.Errorf("%w: %s: %w", store.ErrInvalid, key, err)
	}
	return store.Event{Revision: next, Op: store.OpPut, Object: obj}, data, nil, nil
}

// Apply commits all mutations as one revision (one etcd transaction), or none.
func (s *Store) Apply(ctx context.Context, muts []store.Mutation) (store.ApplyResult, error) {
	return s.apply(ctx, nil, muts)
}

// ApplyAt is Apply only while the store revision is head
// (store.RevisionApplier): every attempt is planned on this replica's view
// and committed only if etcd's head is that view's, so a replica behind head
// or another replica's commit in between is a conflict.
func (s *Store) ApplyAt(ctx context.Context, head store.Revision, muts []store.Mutation) (store.ApplyResult, error) {
	return s.apply(ctx, &head, muts)
}

func (s *Store) apply(ctx context.Context, head *store.Revision, muts []store.Mutation) (store.ApplyResult, error) {
	if err := ctx.Err(); err != nil {
		return store.ApplyResult{}, err
	}
	if err := store.ValidateMutations(muts); err != nil {
		return store.ApplyResult{}, err
	}
	ctx, cancel := context.WithTimeout(ctx, s.cfg.ApplyTimeout)
	defer cancel()
	s.applyMu.Lock()
	defer s.applyMu.Unlock()
	// Attempts whose outcome was unknown, by the revision they would have made:
	// if one of them did commit, that is this Apply's result.
	unknown := map[string]plan{}
	var lastUnknown error
	for attempt := 1; attempt <= MaxCommitAttempts; attempt++ {
		p, err := s.planApply(muts)
		if err != nil {
			return store.ApplyResult{}, err
		}
		if head != nil && p.base != *head {
			return store.ApplyResult{}, &store.RevisionConflictError{Expected: *head, Actual: p.base}
		}
		if len(p.events) == 0 {
			return p.res, nil
		}
		now := time.Now().UTC().Round(0) // no monotonic reading: equal after a JSON round trip
		for i := range p.events {
			p.events[i].Time = now
		}
		id := newID()
		res, err := s.commit(ctx, p, id, now)
		switch {
		case err == nil && res.committed:
			s.publish(p.base, p.events)
			return p.res, nil
		case err != nil && !res.unknown:
			return store.ApplyResult{}, err
		case err != nil:
			unknown[id], lastUnknown = p, err
			s.log.Warn("commit outcome unknown; reading it back", "revision", p.base+1, "error", err)
			if res, err = s.resolve(ctx, p.base+1); err != nil {
				return store.ApplyResult{}, err
			}
		}
		// Someone committed p.base+1: us (an unknown attempt) or another replica.
		if prev, ok := unknown[res.winner]; ok {
			s.publish(prev.base, prev.events)
			return prev.res, nil
		}
		if err := s.waitRev(ctx, res.head); err != nil {
			return store.ApplyResult{}, err
		}
	}
	if lastUnknown != nil {
		return store.ApplyResult{}, fmt.Errorf("etcdstore: apply: not committed after %d attempts (transient: retry); last: %w", MaxCommitAttempts, lastUnknown)
	}
	return store.ApplyResult{}, fmt.Errorf("etcdstore: apply: other replicas committed first %d times in a row; retry", MaxCommitAttempts)
}

type commitResult struct {
	committed bool
	unknown   bool           // the request failed in a way that may have committed
	head      store.Revision // when not committed: the head etcd holds
	winner    string         // when not committed: the id of record base+1, if read
}

// headCompare is "l/head still says base".
func (s *Store) headCompare(base store.Revision) clientv3.Cmp {
	if base == 0 {
		return clientv3.Compare(clientv3.CreateRevision(s.k.head), "=", 0)
	}
	return clientv3.Compare(clientv3.Value(s.k.head), "=", strconv.FormatInt(int64(base), 10))
}

// commit writes revision p.base+1 in one transaction (chunks staged before).
func (s *Store) commit(ctx context.Context, p plan, id string, now time.Time) (commitResult, error) {
	next := p.base + 1
	rec := record{ID: id, Time: now}
	var ops []clientv3.Op
	if len(p.encoded) <= s.cfg.InlineBytes {
		rec.Events = p.encoded
	} else {
		chunks := split(p.encoded, s.cfg.ChunkBytes)
		if len(chunks)+3 > s.cfg.MaxTxnOps {
			return commitResult{}, fmt.Errorf("%w: apply's change set is %d bytes: %d chunks of %d bytes, but one etcd transaction (--max-txn-ops %d) commits at most %d",
				store.ErrInvalid, len(p.encoded), len(chunks), s.cfg.ChunkBytes, s.cfg.MaxTxnOps, s.cfg.MaxTxnOps-3)
		}
		lease, err := s.stage(ctx, id, chunks)
		if err != nil {
			return commitResult{}, err
		}
		// Revoking deletes the chunks of an attempt that did not commit; after a
		// commit nothing is attached to the lease any more.
		defer s.revoke(lease)
		rec.Chunks, rec.Bytes, rec.SHA256 = len(chunks), len(p.encoded), sum(p.encoded)
		ops = append(ops, clientv3.OpPut(s.k.chunkIndex(next), id))
		for i := range chunks {
			ops = append(ops, clientv3.OpPut(s.k.chunk(id, i), "", clientv3.WithIgnoreValue()))
		}
	}
	data, err := json.Marshal(rec)
	if err != nil {
		return commitResult{}, fmt.Errorf("etcdstore: encode record: %w", err)
	}
	if s.beforeCommit != nil {
		s.beforeCommit(id)
	}
	ops = append(ops, clientv3.OpPut(s.k.head, strconv.FormatInt(int64(next), 10)), clientv3.OpPut(s.k.record(next), string(data)))
	resp, err := s.cli.Txn(ctx).If(s.headCompare(p.base)).Then(ops...).Else(clientv3.OpGet(s.k.head), clientv3.OpGet(s.k.record(next))).Commit()
	if err != nil {
		if s.isClosed() {
			return commitResult{}, store.ErrClosed
		}
		if ctx.Err() != nil {
			// The caller gave up; whether it committed shows in the log.
			return commitResult{}, fmt.Errorf("etcdstore: commit revision %d (outcome unknown: read it back): %w", next, ctx.Err())
		}
		if refused(err) {
			return commitResult{}, fmt.Errorf("etcdstore: commit revision %d refused by etcd: %w", next, err)
		}
		return commitResult{unknown: true}, fmt.Errorf("etcdstore: commit revision %d: %w", next, err)
	}
	if resp.Succeeded {
		return commitResult{committed: true}, nil
	}
	return s.lost(resp.Responses[0].GetResponseRange(), resp.Responses[1].GetResponseRange())
}

// refused reports whether etcd refused a request before proposing it (too
// large, too many operations, a chunk key gone), so it certainly did not commit.
func refused(err error) bool {
	code := status.Code(err)
	var ee rpctypes.EtcdError // what clientv3 turns the server's errors into
	if errors.As(err, &ee) {
		code = ee.Code()
	}
	switch code {
	case codes.InvalidArgument, codes.ResourceExhausted, codes.OutOfRange, codes.FailedPrecondition,
		codes.PermissionDenied, codes.Unauthenticated:
		return true
	}
	return false
}

// lost reads what a failed compare returned: the head and record base+1.
func (s *Store) lost(head, rec *pb.RangeResponse) (commitResult, error) {
	var res commitResult
	if len(head.Kvs) == 1 {
		h, err := parseRevision(s.k.head, head.Kvs[0].Value)
		if err != nil {
			return commitResult{}, fmt.Errorf("etcdstore: %w", err)
		}
		res.head = h
	}
	if len(rec.Kvs) == 1 {
		var r record
		if err := json.Unmarshal(rec.Kvs[0].Value, &r); err != nil {
			return commitResult{}, fmt.Errorf("etcdstore: record %s: %w", rec.Kvs[0].Key, err)
		}
		res.winner = r.ID
	}
	return res, nil
}

// resolve finds out, after a commit whose outcome is unknown, who committed
// revision next (if anyone): a linearizable read on the (new) leader returns
// only once every entry an earlier leader could still commit is decided. It
// retries until ctx ends, since etcd may be electing a leader.
func (s *Store) resolve(ctx context.Context, next store.Revision) (commitResult, error) {
	var last error
	for {
		rctx, cancel := context.WithTimeout(ctx, s.cfg.RequestTimeout)
		resp, err := s.cli.Txn(rctx).Then(clientv3.OpGet(s.k.head), clientv3.OpGet(s.k.record(next))).Commit()
		cancel()
		if err == nil {
			return s.lost(resp.Responses[0].GetResponseRange(), resp.Responses[1].GetResponseRange())
		}
		last = err
		if s.isClosed() {
			return commitResult{}, store.ErrClosed
		}
		select {
		case <-ctx.Done():
			return commitResult{}, fmt.Errorf("etcdstore: commit of revision %d: outcome unknown (%v): %w", next, last, ctx.Err())
		case <-time.After(retryBackoff):
		}
	}
}

// retryBackoff is the pause between reads that wait for etcd to answer again.
const retryBackoff = 100 * time.Millisecond

// stage writes the chunks of a large change set under a lease of ChunkLeaseTTL.
func (s *Store) stage(ctx context.Context, id string, chunks [][]byte) (clientv3.LeaseID, error) {
	ttl := int64((s.cfg.ChunkLeaseTTL + time.Second - 1) / time.Second)
	lease, err := s.cli.Grant(ctx, ttl)
	if err != nil {
		return 0, fmt.Errorf("etcdstore: lease for the chunks of a large apply: %w", err)
	}
	for i, c := range chunks {
		if _, err := s.cli.Put(ctx, s.k.chunk(id, i), string(c), clientv3.WithLease(lease.ID)); err != nil {
			s.revoke(lease.ID)
			return 0, fmt.Errorf("etcdstore: write chunk %d of %d of a large apply: %w", i+1, len(chunks), err)
		}
	}
	return lease.ID, nil
}

// revoke drops a chunk lease (and any chunk still attached to it); failure only
// leaves the lease to expire.
func (s *Store) revoke(id clientv3.LeaseID) {
	ctx, cancel := context.WithTimeout(context.Background(), s.cfg.RequestTimeout)
	defer cancel()
	if _, err := s.cli.Revoke(ctx, id); err != nil {
		s.log.Debug("revoking a chunk lease failed; it expires", "error", err)
	}
}
