// Package boltstore is Weft's embedded default store: one bbolt file per data
// directory. Every Apply is one bbolt write transaction (atomic and fsync'd), so a
// crash leaves either the old or the new revision. Current objects are mirrored in
// memory for Get/List; history is read from disk for History and watch catch-up.
package boltstore

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"time"

	"github.com/hashicorp/go-hclog"
	bolt "go.etcd.io/bbolt"
	berrors "go.etcd.io/bbolt/errors"

	"github.com/weft-mesh/weft/pilot/resource"
	"github.com/weft-mesh/weft/pilot/store"
	"github.com/weft-mesh/weft/pilot/store/watchhub"
)

// FileName is the bbolt file inside the data directory.
const FileName = "store.db"

// Defaults for the options.
const (
	DefaultLockTimeout = 2 * time.Second
	DefaultWatchBuffer = 1024 // revisions pending per watcher before it is cut off
	// defaultCatchUp bounds how many revisions a watcher reads from disk per read
	// transaction, so a catch-up never holds a long read transaction open.
	defaultCatchUp = 256
)

type config struct {
	lockTimeout time.Duration
	watchBuffer int
	logger      hclog.Logger
	catchUp     int // revisions per catch-up read; tests lower it to cross chunk edges
	applyBytes  int // store.MaxApplyBytes; tests lower it
}

// Option sets an optional setting of Open.
type Option func(*config)

// WithLockTimeout bounds how long Open waits for the file lock another process
// (a second pilot on the same directory) holds. Must be > 0.
func WithLockTimeout(d time.Duration) Option { return func(c *config) { c.lockTimeout = d } }

// WithWatchBuffer sets how many committed revisions a watcher may have pending
// before its channel is closed with store.ErrWatchOverflow. Must be >= 1.
func WithWatchBuffer(n int) Option { return func(c *config) { c.watchBuffer = n } }

// WithLogger sets the logger (default: discard).
func WithLogger(l hclog.Logger) Option { return func(c *config) { c.logger = l } }

func (c *config) check() error {
	if c.lockTimeout <= 0 {
		return fmt.Errorf("boltstore: lock timeout must be > 0, got %s", c.lockTimeout)
	}
	if c.watchBuffer < 1 {
		return fmt.Errorf("boltstore: watch buffer must be >= 1, got %d", c.watchBuffer)
	}
	if c.logger == nil {
		return errors.New("boltstore: logger must not be nil")
	}
	return nil
}

// Store is the bbolt-backed store.Store. It also implements store.Compactor and
// store.WatchBufferer.
type Store struct {
	db   *bolt.DB
	cfg  config
	path string
	done chan struct{} // closed by Close; stops watchers

	// applyMu serialises writers (Apply, Compact, Close). While it is held the
	// writer may read objects without stateMu: only holders of both mutate it.
	applyMu sync.Mutex

	stateMu   sync.RWMutex // guards the fields below
	objects   store.Objects
	rev       store.Revision
	compacted store.Revision // history before this revision is gone
	hub       *watchhub.Hub  // the live watchers (its state guarded by stateMu)
	closed    bool

	id string // store.Identifier; set by load, then read-only
}

// ID is the store's identity (store.Identifier): made when the file was created.
func (s *Store) ID() string { return s.id }

var (
	_ store.Store         = (*Store)(nil)
	_ store.Compactor     = (*Store)(nil)
	_ store.WatchBufferer = (*Store)(nil)
	_ store.Identifier    = (*Store)(nil)
	_ store.HistoryPager  = (*Store)(nil)
)

// Open opens (creating if needed) the store in dir/store.db and loads the current
// objects. It fails after the lock timeout if another process has the file open.
func Open(dir string, opts ...Option) (*Store, error) {
	cfg := config{lockTimeout: DefaultLockTimeout, watchBuffer: DefaultWatchBuffer, logger: hclog.NewNullLogger(), catchUp: defaultCatchUp, applyBytes: store.MaxApplyBytes}
	for _, o := range opts {
		o(&cfg)
	}
	if err := cfg.check(); err != nil {
		return nil, err
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, fmt.Errorf("boltstore: create data dir: %w", err)
	}
	path := filepath.Join(dir, FileName)
	existed, err := checkFile(path)
	if err != nil {
		return nil, err
	}
	var db *bolt.DB
	err = guarded(path, func() (err error) {
		db, err = bolt.Open(path, 0o600, &bolt.Options{Timeout: cfg.lockTimeout})
		return err
	})
	if errors.Is(err, store.ErrCorrupt) {
		return nil, err // db, if any, is not safe to touch (guarded says why)
	}
	if errors.Is(err, berrors.ErrTimeout) {
		return nil, fmt.Errorf("boltstore: open %s: file is locked by another process (waited %s): %w", path, cfg.lockTimeout, err)
	}
	if errors.Is(err, berrors.ErrInvalid) || errors.Is(err, berrors.ErrChecksum) || errors.Is(err, berrors.ErrVersionMismatch) {
		return nil, fmt.Errorf("%w: %s: the database file is damaged: %w", store.ErrCorrupt, path, err)
	}
	if err != nil {
		return nil, fmt.Errorf("boltstore: open %s: %w", path, err)
	}
	if existed {
		if err := verify(db, path); err != nil {
			if !errors.Is(err, errPanicked) {
				_ = db.Close()
			}
			return nil, err
		}
	}
	s := &Store{
		db: db, cfg: cfg, path: path, done: make(chan struct{}),
		objects: make(store.Objects),
	}
	s.hub = watchhub.New(&s.stateMu, cfg.watchBuffer, s.done, s.head, s.readHistory)
	if err := guarded(path, s.load); err != nil {
		if !errors.Is(err, errPanicked) {
			_ = db.Close()
		}
		return nil, fmt.Errorf("boltstore: open %s: %w", path, err)
	}
	cfg.logger.Info("store opened", "path", path, "revision", s.rev, "objects", len(s.objects), "compacted_before", s.compacted)
	return s, nil
}

func (s *Store) load() error {
	err := s.db.Update(func(tx *bolt.Tx) error {
		for _, b := range [][]byte{bucketObjects, bucketHistory, bucketKeyIndex, bucketMeta} {
			if _, err := tx.CreateBucketIfNotExists(b); err != nil {
				return fmt.Errorf("create bucket %s: %w", b, err)
			}
		}
		// Stores made before identities existed get one on their next open.
		if meta := tx.Bucket(bucketMeta); meta.Get(metaID) == nil {
			id, err := newID()
			if err != nil {
				return fmt.Errorf("store id: %w", err)
			}
			return meta.Put(metaID, id)
		}
		return nil
	})
	if err != nil {
		return err
	}
	return s.db.View(func(tx *bolt.Tx) error {
		meta := tx.Bucket(bucketMeta)
		s.id = string(meta.Get(metaID))
		rev, err := decodeUint(meta.Get(metaRevision))
		if err != nil {
			return fmt.Errorf("meta %s: %w", metaRevision, err)
		}
		comp, err := decodeUint(meta.Get(metaCompacted))
		if err != nil {
			return fmt.Errorf("meta %s: %w", metaCompacted, err)
		}
		s.rev, s.compacted = store.Revision(rev), store.Revision(comp)
		return tx.Bucket(bucketObjects).ForEach(func(k, v []byte) error {
			o, err := store.DecodeObject(v)
			if err != nil {
				return err
			}
			if store.ObjectKey(o.Key()) != string(k) {
				return fmt.Errorf("object %s stored under another key %q", o.Key(), k)
			}
			c, err := store.ContentOf(o)
			if err != nil {
				return err
			}
			s.objects[string(k)] = store.Entry{Obj: o, Content: c}
			return nil
		})
	})
}

// WatchBuffer reports the per-watcher limit of pending revisions.
func (s *Store) WatchBuffer() int { return s.cfg.watchBuffer }

// Get returns the current object or store.ErrNotFound.
func (s *Store) Get(ctx context.Context, key resource.Key) (*resource.Object, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	s.stateMu.RLock()
	defer s.stateMu.RUnlock()
	if s.closed {
		return nil, store.ErrClosed
	}
	return s.objects.Get(key)
}

// List returns current objects of kind (any when empty; Kind, plural or lower-case
// name) in namespace (any when empty), sorted by key, with the revision read at.
func (s *Store) List(ctx context.Context, kind, namespace string) ([]*resource.Object, store.Revision, error) {
	if err := ctx.Err(); err != nil {
		return nil, 0, err
	}
	kind, err := store.ListKind(kind)
	if err != nil {
		return nil, 0, err
	}
	s.stateMu.RLock()
	if s.closed {
		s.stateMu.RUnlock()
		return nil, 0, store.ErrClosed
	}
	out, rev := s.objects.List(kind, namespace), s.rev
	s.stateMu.RUnlock()
	return out, rev, nil
}

// Revision returns the current store revision.
func (s *Store) Revision(ctx context.Context) (store.Revision, error) {
	if err := ctx.Err(); err != nil {
		return 0, err
	}
	s.stateMu.RLock()
	defer s.stateMu.RUnlock()
	if s.closed {
		return 0, store.ErrClosed
	}
	return s.rev, nil
}

// change is one planned write of an Apply.
type change struct {
	key   string
	event store.Event
	data  []byte // encoded event object: the new value, or for a delete the last one
	entry store.Entry
}

// Apply commits all mutations as one revision in one bbolt transaction, or nothing.
func (s *Store) Apply(ctx context.Context, muts []store.Mutation) (store.ApplyResult, error) {
	return s.apply(ctx, nil, muts)
}

// ApplyAt is Apply only while the store revision is head (store.RevisionApplier).
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
	s.applyMu.Lock()
	defer s.applyMu.Unlock()
	s.stateMu.RLock()
	closed, cur := s.closed, s.rev
	s.stateMu.RUnlock()
	if closed {
		return store.ApplyResult{}, store.ErrClosed
	}
	if head != nil && *head != cur {
		return store.ApplyResult{}, &store.RevisionConflictError{Expected: *head, Actual: cur}
	}
	// Check every precondition before planning anything, so a conflict anywhere
	// in a bulk apply writes nothing.
	for _, m := range muts {
		key := m.Object.Key()
		e, exists := s.objects[store.ObjectKey(key)]
		var actual int64
		if exists {
			actual = e.Obj.Metadata.Generation
		}
		if m.IfMatch != nil && *m.IfMatch != actual {
			return store.ApplyResult{}, &store.ConflictError{Key: key, Expected: *m.IfMatch, Actual: actual}
		}
		if m.Op == store.OpDelete && !exists {
			return store.ApplyResult{}, fmt.Errorf("delete %s: %w", key, store.ErrNotFound)
		}
	}
	next := cur + 1
	now := time.Now().UTC().Round(0) // no monotonic reading: equal before and after a JSON round trip
	res := store.ApplyResult{Revision: cur, Objects: make([]*resource.Object, len(muts))}
	changes := make([]change, 0, len(muts))
	total := 0
	for i, m := range muts {
		c, unchanged, err := plan(m, s.objects, next, now)
		if err != nil {
			return store.ApplyResult{}, err
		}
		if unchanged != nil {
			res.Objects[i] = unchanged
			continue
		}
		if total += len(c.data); total > s.cfg.applyBytes {
			return store.ApplyResult{}, fmt.Errorf("%w: apply encodes to more than %d bytes (at %s)", store.ErrInvalid, s.cfg.applyBytes, m.Object.Key())
		}
		res.Objects[i] = c.event.Object
		changes = append(changes, c)
	}
	if len(changes) == 0 {
		return res, nil
	}
	if err := s.commit(next, changes); err != nil {
		return store.ApplyResult{}, err
	}
	res.Revision, res.Changed = next, true
	s.publish(next, changes)
	return res, nil
}

// plan works out one mutation's write, or returns the stored object when a PUT
// changes nothing.
func plan(m store.Mutation, objects store.Objects, next store.Revision, now time.Time) (change, *resource.Object, error) {
	key := m.Object.Key()
	k := store.ObjectKey(key)
	old, exists := objects[k]
	if m.Op == store.OpDelete {
		last := *old.Obj
		last.Metadata.Revision = int64(next)
		data, err := encodeObject(&last)
		if err != nil {
			return change{}, nil, err
		}
		return change{key: k, data: data, event: store.Event{Revision: next, Op: store.OpDelete, Object: &last, Time: now}}, nil, nil
	}
	content, err := store.ContentOf(m.Object)
	if err != nil {
		return change{}, nil, fmt.Errorf("%w: %w", store.ErrInvalid, err)
	}
	if exists && bytes.Equal(content, old.Content) {
		return change{}, old.Obj, nil
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
	data, err := encodeObject(&resource.Object{APIVersion: apiVersion, Kind: m.Object.Kind, Metadata: md, Spec: m.Object.Spec, Status: m.Object.Status})
	if err != nil {
		return change{}, nil, fmt.Errorf("%w: %w", store.ErrInvalid, err)
	}
	if len(data) > store.MaxObjectBytes {
		return change{}, nil, fmt.Errorf("%w: %s: encoded object is %d bytes, limit is %d", store.ErrInvalid, key, len(data), store.MaxObjectBytes)
	}
	// Decode what was encoded: the stored object shares nothing with the caller's
	// and is exactly what a restart will load.
	obj, err := store.DecodeObject(data)
	if err != nil {
		return change{}, nil, fmt.Errorf("%w: %s: %w", store.ErrInvalid, key, err)
	}
	return change{key: k, data: data, entry: store.Entry{Obj: obj, Content: content},
		event: store.Event{Revision: next, Op: store.OpPut, Object: obj, Time: now}}, nil, nil
}

// commit writes one revision in one bbolt transaction.
func (s *Store) commit(rev store.Revision, changes []change) error {
	err := s.db.Update(func(tx *bolt.Tx) error {
		objs, hist, idx := tx.Bucket(bucketObjects), tx.Bucket(bucketHistory), tx.Bucket(bucketKeyIndex)
		for i, c := range changes {
			var err error
			if c.event.Op == store.OpDelete {
				err = objs.Delete([]byte(c.key))
			} else {
				err = objs.Put([]byte(c.key), c.data)
			}
			if err != nil {
				return fmt.Errorf("write %s: %w", c.event.Object.Key(), err)
			}
			ev, err := encodeEvent(c.event, c.data)
			if err != nil {
				return err
			}
			if err := hist.Put(histKey(rev, i), ev); err != nil {
				return fmt.Errorf("write history of %s: %w", c.event.Object.Key(), err)
			}
			if err := idx.Put(indexKey(c.key, rev, i), nil); err != nil {
				return fmt.Errorf("write history index of %s: %w", c.event.Object.Key(), err)
			}
		}
		return tx.Bucket(bucketMeta).Put(metaRevision, encodeUint(int64(rev)))
	})
	if errors.Is(err, berrors.ErrDatabaseNotOpen) {
		return store.ErrClosed
	}
	if err != nil {
		return fmt.Errorf("boltstore: commit revision %d: %w", rev, err)
	}
	return nil
}

// publish makes a committed revision visible to readers and queues it for every
// watcher under stateMu (so queues fill in revision order); wake-ups happen after
// the lock is released.
func (s *Store) publish(rev store.Revision, changes []change) {
	batch := make([]store.Event, len(changes))
	s.stateMu.Lock()
	for i, c := range changes {
		if c.event.Op == store.OpDelete {
			delete(s.objects, c.key)
		} else {
			s.objects[c.key] = c.entry
		}
		batch[i] = c.event
	}
	s.rev = rev
	wake, cut := s.hub.Publish(batch)
	s.stateMu.Unlock()
	for range cut {
		s.cfg.logger.Warn("watcher cut off: buffer full", "revision", rev, "buffer", s.cfg.watchBuffer)
	}
	wake.Wake()
}

// History returns every retained change of one object, oldest first.
func (s *Store) History(ctx context.Context, key resource.Key) ([]store.Event, error) {
	out, _, err := s.history(ctx, key, 0, 0)
	return out, err
}

// HistoryPage is store.HistoryPager: a seek in the key index, so a page costs
// its own entries, not the object's whole history.
func (s *Store) HistoryPage(ctx context.Context, key resource.Key, after store.Revision, limit int) ([]store.Event, bool, error) {
	if err := store.CheckHistoryPage(limit); err != nil {
		return nil, false, err
	}
	return s.history(ctx, key, after, limit)
}

// history reads key's events after revision after, at most limit (0: all).
func (s *Store) history(ctx context.Context, key resource.Key, after store.Revision, limit int) ([]store.Event, bool, error) {
	if err := ctx.Err(); err != nil {
		return nil, false, err
	}
	if s.isClosed() {
		return nil, false, store.ErrClosed
	}
	prefix := []byte(store.ObjectKey(key) + "\x00")
	page := store.Page{Limit: limit}
	err := s.view(func(tx *bolt.Tx) error {
		hist := tx.Bucket(bucketHistory)
		c := tx.Bucket(bucketKeyIndex).Cursor()
		start := prefix
		if after > 0 {
			start = indexKey(store.ObjectKey(key), after+1, 0)
		}
		for k, _ := c.Seek(start); k != nil && bytes.HasPrefix(k, prefix); k, _ = c.Next() {
			if page.Full() {
				break
			}
			hk := k[len(prefix):]
			v := hist.Get(hk)
			if v == nil {
				return fmt.Errorf("history index of %s points at missing entry %x", key, hk)
			}
			ev, err := decodeEvent(v)
			if err != nil {
				return err
			}
			page.Add(ev)
		}
		return nil
	})
	if errors.Is(err, store.ErrClosed) {
		return nil, false, err
	}
	if err != nil {
		return nil, false, fmt.Errorf("boltstore: history of %s: %w", key, err)
	}
	return page.Result(key, after)
}

// Compact drops history before revision `before` (which must not exceed the
// current revision + 1). Current objects are untouched.
func (s *Store) Compact(ctx context.Context, before store.Revision) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	s.applyMu.Lock()
	defer s.applyMu.Unlock()
	s.stateMu.RLock()
	closed, cur, comp := s.closed, s.rev, s.compacted
	s.stateMu.RUnlock()
	if closed {
		return store.ErrClosed
	}
	if before < 0 || before > cur+1 {
		return fmt.Errorf("compact: %w: revision %d is outside 0..%d", store.ErrInvalid, before, cur+1)
	}
	if before <= comp {
		return nil
	}
	// Raise compacted before the history goes, so no watcher subscribing
	// meanwhile can catch up across the deleted entries unaware (a gap): it
	// gets ErrCompacted, a moment early at worst. Restored if the delete fails.
	s.stateMu.Lock()
	s.compacted = before
	s.stateMu.Unlock()
	err := s.db.Update(func(tx *bolt.Tx) error {
		hist, idx := tx.Bucket(bucketHistory), tx.Bucket(bucketKeyIndex)
		c := hist.Cursor()
		for k, v := c.First(); k != nil; k, v = c.First() {
			rev, err := histKeyRevision(k)
			if err != nil {
				return err
			}
			if rev >= before {
				break
			}
			ev, err := decodeEvent(v)
			if err != nil {
				return err
			}
			if err := idx.Delete(append([]byte(store.ObjectKey(ev.Object.Key())+"\x00"), k...)); err != nil {
				return err
			}
			if err := c.Delete(); err != nil {
				return err
			}
		}
		return tx.Bucket(bucketMeta).Put(metaCompacted, encodeUint(int64(before)))
	})
	if err != nil {
		s.stateMu.Lock()
		s.compacted = comp
		s.stateMu.Unlock()
		return fmt.Errorf("boltstore: compact before %d: %w", before, err)
	}
	s.cfg.logger.Info("history compacted", "before", before)
	return nil
}

// view runs a read transaction; a database closed under it reads as ErrClosed.
func (s *Store) view(fn func(*bolt.Tx) error) error {
	// Verified at open; guarded all the same, so a file damaged under a running
	// pilot fails the read with ErrCorrupt instead of crashing the process.
	err := guarded(s.path, func() error { return s.db.View(fn) })
	if errors.Is(err, berrors.ErrDatabaseNotOpen) {
		return store.ErrClosed
	}
	return err
}

func (s *Store) isClosed() bool {
	s.stateMu.RLock()
	defer s.stateMu.RUnlock()
	return s.closed
}

// Close stops every watcher (their Err is store.ErrClosed), waits for in-flight
// applies and closes the file. Later calls return store.ErrClosed.
func (s *Store) Close() error {
	s.applyMu.Lock()
	s.stateMu.Lock()
	if s.closed {
		s.stateMu.Unlock()
		s.applyMu.Unlock()
		return store.ErrClosed
	}
	s.closed = true
	s.hub.Close()
	s.stateMu.Unlock()
	s.applyMu.Unlock()
	close(s.done)
	s.hub.Wait()
	if err := s.db.Close(); err != nil {
		return fmt.Errorf("boltstore: close %s: %w", s.path, err)
	}
	s.cfg.logger.Info("store closed", "path", s.path)
	return nil
}
