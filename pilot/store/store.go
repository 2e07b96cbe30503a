// Package store defines Weft's revisioned resource store: one monotonic revision for
// the whole store, a generation per object, atomic multi-object applies, append-only
// history and gap-free watches. Backends live in sub-packages (boltstore, ...) and
// must pass the contract suite in storetest.
package store

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/weft-mesh/weft/pilot/resource"
)

// Sentinel errors; test with errors.Is. Conflict, NotFound, Invalid and Compacted are
// permanent for the request that got them; anything else may be transient.
var (
	ErrConflict  = errors.New("conflict")
	ErrNotFound  = errors.New("not found")
	ErrInvalid   = errors.New("invalid")
	ErrCompacted = errors.New("history compacted")
	ErrClosed    = errors.New("store closed")
	// ErrCorrupt: the backend's data is damaged (a truncated or garbled file);
	// permanent: the store refuses to open rather than serve part of it.
	ErrCorrupt = errors.New("store corrupt")
)

// Identifier is a store with an identity: an id made once, when the store was
// created, and kept for its life. Pilot records it beside its publisher key so
// that a store replaced by another (an empty file, a different cluster) is
// refused instead of served as if it were the one pilot published.
type Identifier interface {
	ID() string
}

// ConflictError says which object's generation moved under an If-Match.
type ConflictError struct {
	Key      resource.Key
	Expected int64 // the If-Match generation (0 = must not exist)
	Actual   int64 // the generation stored now (0 = does not exist)
}

func (e *ConflictError) Error() string {
	return fmt.Sprintf("%s: generation is %d, If-Match wanted %d", e.Key, e.Actual, e.Expected)
}

func (e *ConflictError) Unwrap() error { return ErrConflict }

// RevisionConflictError says the store's revision moved under an
// ApplyAt: another write committed after the one the caller read.
type RevisionConflictError struct {
	Expected Revision // the head the caller read
	Actual   Revision // the store's revision now (or the newer one seen)
}

func (e *RevisionConflictError) Error() string {
	return fmt.Sprintf("store revision is %d, the apply was planned at %d", e.Actual, e.Expected)
}

func (e *RevisionConflictError) Unwrap() error { return ErrConflict }

// Revision is the store-wide monotonic revision. 0 means the empty store.
type Revision int64

// Op is the kind of change an Event or history entry records.
type Op string

const (
	OpPut    Op = "PUT"
	OpDelete Op = "DELETE"
)

// Event is one change to one object at one revision. For OpDelete, Object holds the
// last stored value (with the deleting revision in Metadata.Revision).
type Event struct {
	Revision Revision
	Op       Op
	Object   *resource.Object
	Time     time.Time
}

// Mutation is one change inside an atomic Apply. IfMatch, when non-nil, requires the
// object's stored generation to equal *IfMatch (0 = must not exist) or the whole
// apply fails with a *ConflictError and nothing is written.
type Mutation struct {
	Op      Op
	Object  *resource.Object // for OpDelete only Kind/Namespace/Name are read
	IfMatch *int64
}

// ApplyResult reports the revision an Apply produced and each object as stored
// (with Generation and Revision filled in). An Apply whose objects are all identical
// to what is stored writes nothing and returns the current revision, Changed=false.
type ApplyResult struct {
	Revision Revision
	Changed  bool
	Objects  []*resource.Object
}

// Store is the revisioned store. All methods are safe for concurrent use.
type Store interface {
	// Get returns the current object or ErrNotFound.
	Get(ctx context.Context, key resource.Key) (*resource.Object, error)
	// List returns current objects of kind (all kinds when empty) in namespace (all
	// when empty), sorted by key, and the revision the list was read at.
	List(ctx context.Context, kind, namespace string) ([]*resource.Object, Revision, error)
	// Apply commits all mutations as one new revision, or none of them. Deleting an
	// object that does not exist is ErrNotFound. A re-created object (after a
	// delete) starts again at generation 1, as in Kubernetes; its History continues
	// across the delete. Invalid mutations: see ValidateMutations.
	Apply(ctx context.Context, muts []Mutation) (ApplyResult, error)
	// Revision returns the current store revision.
	Revision(ctx context.Context) (Revision, error)
	// History returns every retained change of one object, oldest first, deletes
	// included (ErrNotFound if none, e.g. all compacted away).
	History(ctx context.Context, key resource.Key) ([]Event, error)
	// Watch delivers every event with revision > from, in order, with no gaps, then
	// live events, until ctx ends (the channel is then closed). If history before
	// from+1 was compacted, Watch returns ErrCompacted. A watcher that falls more than
	// the backend's buffer behind has its channel closed; Err on the Watcher says why.
	Watch(ctx context.Context, from Revision) (Watcher, error)
	Close() error
}

// Watcher is a live watch.
type Watcher interface {
	Events() <-chan Event
	// Err is valid after Events is closed: nil on ctx end, or why the watch stopped.
	Err() error
}
