package boltstore

import (
	"context"
	"errors"
	"fmt"

	bolt "go.etcd.io/bbolt"
	berrors "go.etcd.io/bbolt/errors"

	"github.com/weft-mesh/weft/pilot/store"
)

var _ store.Sets = (*Store)(nil)

// A set is the top-level bucket "set/<name>": its records under 'r'+name, its
// revision under setRevKey (no record key starts with NUL).
var setRevKey = []byte("\x00rev")

func setBucket(set string) []byte { return []byte("set/" + set) }

func recordKey(name string) []byte { return append([]byte{'r'}, name...) }

// SetApply is store.Sets: one bbolt transaction, the set's revision + 1.
func (s *Store) SetApply(ctx context.Context, set string, put []store.SetRecord, del []string) (store.Revision, error) {
	if err := store.ValidateSetApply(set, put, del); err != nil {
		return 0, err
	}
	if err := ctx.Err(); err != nil {
		return 0, err
	}
	if s.isClosed() {
		return 0, store.ErrClosed
	}
	var rev int64
	err := guarded(s.path, func() error {
		return s.db.Update(func(tx *bolt.Tx) error {
			b, err := tx.CreateBucketIfNotExists(setBucket(set))
			if err != nil {
				return err
			}
			if rev, err = decodeUint(b.Get(setRevKey)); err != nil {
				return fmt.Errorf("revision: %w", err)
			}
			rev++
			for _, r := range put {
				if err := b.Put(recordKey(r.Name), r.Value); err != nil {
					return fmt.Errorf("record %q: %w", r.Name, err)
				}
			}
			for _, name := range del {
				if err := b.Delete(recordKey(name)); err != nil {
					return fmt.Errorf("record %q: %w", name, err)
				}
			}
			return b.Put(setRevKey, encodeUint(rev))
		})
	})
	if errors.Is(err, berrors.ErrDatabaseNotOpen) {
		return 0, store.ErrClosed
	}
	if err != nil {
		return 0, fmt.Errorf("boltstore: set %s: apply: %w", set, err)
	}
	return store.Revision(rev), nil
}

// SetList is store.Sets.
func (s *Store) SetList(ctx context.Context, set string) ([]store.SetRecord, store.Revision, error) {
	var out []store.SetRecord
	var rev int64
	err := s.readSet(ctx, set, func(b *bolt.Bucket) error {
		var err error
		if rev, err = decodeUint(b.Get(setRevKey)); err != nil {
			return fmt.Errorf("revision: %w", err)
		}
		return b.ForEach(func(k, v []byte) error {
			if len(k) > 0 && k[0] == 'r' {
				out = append(out, store.SetRecord{Name: string(k[1:]), Value: append([]byte(nil), v...)})
			}
			return nil
		})
	})
	if err != nil {
		return nil, 0, err
	}
	return out, store.Revision(rev), nil // bbolt iterates in key order: sorted by name
}

// SetRevision is store.Sets.
func (s *Store) SetRevision(ctx context.Context, set string) (store.Revision, error) {
	var rev int64
	err := s.readSet(ctx, set, func(b *bolt.Bucket) error {
		var err error
		rev, err = decodeUint(b.Get(setRevKey))
		return err
	})
	return store.Revision(rev), err
}

// readSet runs fn on the set's bucket; a set never written reads as empty.
func (s *Store) readSet(ctx context.Context, set string, fn func(*bolt.Bucket) error) error {
	if err := checkReadSet(set); err != nil {
		return err
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	if s.isClosed() {
		return store.ErrClosed
	}
	err := s.view(func(tx *bolt.Tx) error {
		if b := tx.Bucket(setBucket(set)); b != nil {
			return fn(b)
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("boltstore: set %s: read: %w", set, err)
	}
	return nil
}

// checkReadSet validates a set name for a read (as SetApply would).
func checkReadSet(set string) error {
	return store.ValidateSetApply(set, nil, []string{"x"})
}
