package boltstore

import (
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"runtime/debug"

	bolt "go.etcd.io/bbolt"

	"github.com/weft-mesh/weft/pilot/store"
)

// metaID is the store's identity: random bytes written once, when the file is
// created. Pilot records it beside its publisher key, so a file replaced by
// another store (or an empty one) is told apart from the store it published.
var metaID = []byte("store-id")

// errPanicked marks an error from a panic inside bbolt: the *bolt.DB it came
// from must not be used or closed (its locks may be held).
var errPanicked = errors.New("bbolt failed reading it")

// guarded runs fn, which reads the bbolt file, turning what bbolt does on a
// damaged file into an error naming it: bbolt trusts its pages and panics (index
// out of range, nil pointer) or faults (a read past the end of a truncated
// file's mapping: SIGBUS/SIGSEGV, which SetPanicOnFault makes a panic on this
// goroutine) instead of returning an error. A panic inside bbolt may leave its
// locks held, so after one the *bolt.DB must not be used again (not even
// closed): the caller gives up on it and the process exits.
func guarded(path string, fn func() error) (err error) {
	defer debug.SetPanicOnFault(debug.SetPanicOnFault(true))
	defer func() {
		if r := recover(); r != nil {
			err = fmt.Errorf("%w: %s: the database file is damaged (%w: %v)", store.ErrCorrupt, path, errPanicked, r)
		}
	}()
	return fn()
}

// checkFile refuses what bbolt would silently turn into a new, empty store: an
// existing file of 0 bytes (bbolt initialises it). A missing file is a new store.
func checkFile(path string) (exists bool, err error) {
	fi, err := os.Stat(path)
	if errors.Is(err, os.ErrNotExist) {
		return false, nil
	}
	if err != nil {
		return false, fmt.Errorf("boltstore: %s: %w", path, err)
	}
	if fi.Size() == 0 {
		return true, fmt.Errorf("%w: %s is empty (0 bytes): refusing to start a new, empty store over it; move it away to start afresh, or restore it from a backup", store.ErrCorrupt, path)
	}
	return true, nil
}

// verify reads every page a request could reach, within guarded, so damage is
// found at open rather than by a request later: the file must hold all pages
// up to the meta's high-water mark (a truncated file does not), every bucket
// and key/value is walked, and then bbolt's own consistency check runs (page
// reachability, double frees, a freelist claiming pages in use). Check runs on
// a goroutine of bbolt's own, which recovers bbolt's panics but not faults;
// the walk before it has touched every page it reads, on this goroutine.
func verify(db *bolt.DB, path string) error {
	fi, err := os.Stat(path)
	if err != nil {
		return fmt.Errorf("boltstore: %s: %w", path, err)
	}
	return guarded(path, func() error {
		return db.View(func(tx *bolt.Tx) error {
			if need := tx.Size(); need > fi.Size() {
				return fmt.Errorf("%w: %s is truncated: %d bytes, its pages need %d", store.ErrCorrupt, path, fi.Size(), need)
			}
			var walk func(b *bolt.Bucket, depth int) error
			walk = func(b *bolt.Bucket, depth int) error {
				if depth > 2 { // our layout has one level of buckets
					return fmt.Errorf("%w: %s: buckets nested deeper than this store writes", store.ErrCorrupt, path)
				}
				return b.ForEach(func(k, v []byte) error {
					if v == nil {
						if c := b.Bucket(k); c != nil {
							return walk(c, depth+1)
						}
					}
					return nil
				})
			}
			if err := tx.ForEach(func(name []byte, b *bolt.Bucket) error { return walk(b, 1) }); err != nil {
				return err
			}
			var errs []error
			for e := range tx.Check() {
				if len(errs) < 5 {
					errs = append(errs, e)
				}
			}
			if len(errs) > 0 {
				return fmt.Errorf("%w: %s failed bbolt's consistency check: %w", store.ErrCorrupt, path, errors.Join(errs...))
			}
			return nil
		})
	})
}

// newID makes a store identity.
func newID() ([]byte, error) {
	b := make([]byte, 16)
	if _, err := rand.Read(b); err != nil {
		return nil, err
	}
	return []byte(hex.EncodeToString(b)), nil
}
