package etcdstore

import (
	"context"
	"fmt"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/weft-mesh/weft/pilot/store"
)

// Watch is watchhub's: it catches up from the etcd log (readHistory), then
// forwards live revisions, with no gap and no repeat at the boundary.
func (s *Store) Watch(ctx context.Context, from store.Revision) (store.Watcher, error) {
	return s.hub.Watch(ctx, from)
}

// head is watchhub.Head (stateMu held).
func (s *Store) head() (rev, compacted store.Revision) { return s.rev, s.compacted }

// readHistory reads the events of revisions after+1..min(upTo, after+catchUpRecords)
// at one etcd revision, checking l/compacted in the same read.
func (s *Store) readHistory(ctx context.Context, after, upTo store.Revision) ([]store.Event, store.Revision, error) {
	ctx, cancel := context.WithTimeout(ctx, s.cfg.RequestTimeout)
	defer cancel()
	end := min(upTo, after+catchUpRecords)
	resp, err := s.cli.Txn(ctx).Then(clientv3.OpGet(s.k.compacted)).Commit()
	if err != nil {
		if s.isClosed() {
			return nil, 0, store.ErrClosed
		}
		return nil, 0, fmt.Errorf("etcdstore: watch catch-up: %w", err)
	}
	if kvs := resp.Responses[0].GetResponseRange().Kvs; len(kvs) == 1 {
		comp, err := parseRevision(s.k.compacted, kvs[0].Value)
		if err != nil {
			return nil, 0, fmt.Errorf("etcdstore: %w", err)
		}
		if after+1 < comp {
			return nil, 0, fmt.Errorf("watch catch-up from %d: history before %d: %w", after, comp, store.ErrCompacted)
		}
	}
	var out []store.Event
	err = s.readRecords(ctx, after, end, resp.Header.Revision, func(_ store.Revision, evs []store.Event) error {
		out = append(out, evs...)
		return nil
	})
	if err != nil {
		if s.isClosed() {
			return nil, 0, store.ErrClosed
		}
		return nil, 0, fmt.Errorf("etcdstore: watch catch-up: %w", err)
	}
	return out, end, nil
}
