package boltstore

import (
	"context"
	"errors"
	"fmt"

	bolt "go.etcd.io/bbolt"

	"github.com/weft-mesh/weft/pilot/store"
)

// Watch is watchhub's: it catches up from disk (readHistory), then forwards
// live revisions, with no gap and no repeat at the boundary.
func (s *Store) Watch(ctx context.Context, from store.Revision) (store.Watcher, error) {
	return s.hub.Watch(ctx, from)
}

// head is watchhub.Head (stateMu held).
func (s *Store) head() (rev, compacted store.Revision) { return s.rev, s.compacted }

// readHistory reads the events of revisions after+1..min(upTo, after+catchUp)
// in one short read transaction and returns them with the last revision covered
// (watchhub.CatchUp; a bolt read does not wait, so it ignores ctx).
func (s *Store) readHistory(_ context.Context, after, upTo store.Revision) ([]store.Event, store.Revision, error) {
	end := min(upTo, after+store.Revision(s.cfg.catchUp))
	var out []store.Event
	err := s.view(func(tx *bolt.Tx) error {
		comp, err := decodeUint(tx.Bucket(bucketMeta).Get(metaCompacted))
		if err != nil {
			return err
		}
		if after+1 < store.Revision(comp) {
			return fmt.Errorf("watch catch-up from %d: history before %d: %w", after, comp, store.ErrCompacted)
		}
		c := tx.Bucket(bucketHistory).Cursor()
		for k, v := c.Seek(histKey(after+1, 0)); k != nil; k, v = c.Next() {
			rev, err := histKeyRevision(k)
			if err != nil {
				return err
			}
			if rev > end {
				break
			}
			ev, err := decodeEvent(v)
			if err != nil {
				return err
			}
			out = append(out, ev)
		}
		return nil
	})
	if errors.Is(err, store.ErrClosed) {
		return nil, 0, err
	}
	if err != nil {
		return nil, 0, fmt.Errorf("boltstore: %w", err)
	}
	return out, end, nil
}
