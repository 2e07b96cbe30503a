package etcdstore

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/weft-mesh/weft/pilot/resource"
	"github.com/weft-mesh/weft/pilot/store"
)

// History returns every retained change of one object, oldest first. It reads
// the retained log (catchUpRecords records per request) at one etcd revision:
// its cost grows with the retained history, which compaction bounds.
func (s *Store) History(ctx context.Context, key resource.Key) ([]store.Event, error) {
	evs, _, err := s.history(ctx, key, 0, 0)
	return evs, err
}

// HistoryPage is store.HistoryPager: key's events after revision after, at most
// limit (1..store.MaxHistoryPage). It reads the log from after on, so paging
// through an object's history costs one pass over the retained log in all.
func (s *Store) HistoryPage(ctx context.Context, key resource.Key, after store.Revision, limit int) ([]store.Event, bool, error) {
	if err := store.CheckHistoryPage(limit); err != nil {
		return nil, false, err
	}
	if after < 0 {
		return nil, false, fmt.Errorf("%w: history page after revision %d is negative", store.ErrInvalid, after)
	}
	return s.history(ctx, key, after, limit)
}

// errPageFull stops a log read once a history page has one event past its limit.
var errPageFull = errors.New("page full")

// history reads key's events after revision after, at most limit (0: all).
func (s *Store) history(ctx context.Context, key resource.Key, after store.Revision, limit int) ([]store.Event, bool, error) {
	if err := ctx.Err(); err != nil {
		return nil, false, err
	}
	if s.isClosed() {
		return nil, false, store.ErrClosed
	}
	resp, err := s.cli.Txn(ctx).Then(clientv3.OpGet(s.k.head), clientv3.OpGet(s.k.compacted)).Commit()
	if err != nil {
		if s.isClosed() {
			return nil, false, store.ErrClosed
		}
		return nil, false, fmt.Errorf("etcdstore: history of %s: %w", key, err)
	}
	var head, comp store.Revision
	if kvs := resp.Responses[0].GetResponseRange().Kvs; len(kvs) == 1 {
		if head, err = parseRevision(s.k.head, kvs[0].Value); err != nil {
			return nil, false, fmt.Errorf("etcdstore: %w", err)
		}
	}
	if kvs := resp.Responses[1].GetResponseRange().Kvs; len(kvs) == 1 {
		if comp, err = parseRevision(s.k.compacted, kvs[0].Value); err != nil {
			return nil, false, fmt.Errorf("etcdstore: %w", err)
		}
	}
	page := store.Page{Limit: limit}
	err = s.readRecords(ctx, max(comp-1, after, 0), head, resp.Header.Revision, func(_ store.Revision, evs []store.Event) error {
		for _, ev := range evs {
			if ev.Object.Key() != key {
				continue
			}
			if !page.Add(ev) {
				return errPageFull
			}
		}
		return nil
	})
	if err != nil && !errors.Is(err, errPageFull) {
		if s.isClosed() {
			return nil, false, store.ErrClosed
		}
		return nil, false, fmt.Errorf("etcdstore: history of %s: %w", key, err)
	}
	return page.Result(key, after)
}

// Compact drops history before revision `before` (at most the head + 1): it
// writes a snapshot of every object at this replica's revision, then moves
// l/compacted and s/manifest in one transaction, then deletes what is below.
func (s *Store) Compact(ctx context.Context, before store.Revision) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	s.applyMu.Lock()
	defer s.applyMu.Unlock()
	if err := s.sync(ctx); err != nil {
		return err
	}
	s.stateMu.RLock()
	closed, cur := s.closed, s.rev
	s.stateMu.RUnlock()
	if closed {
		return store.ErrClosed
	}
	if before < 0 || before > cur+1 {
		return fmt.Errorf("compact: %w: revision %d is outside 0..%d", store.ErrInvalid, before, cur+1)
	}
	resp, err := s.cli.Txn(ctx).Then(clientv3.OpGet(s.k.compacted), clientv3.OpGet(s.k.manifest)).Commit()
	if err != nil {
		return fmt.Errorf("etcdstore: compact: read: %w", err)
	}
	var comp store.Revision
	compCmp := clientv3.Compare(clientv3.CreateRevision(s.k.compacted), "=", 0)
	if kvs := resp.Responses[0].GetResponseRange().Kvs; len(kvs) == 1 {
		if comp, err = parseRevision(s.k.compacted, kvs[0].Value); err != nil {
			return fmt.Errorf("etcdstore: %w", err)
		}
		compCmp = clientv3.Compare(clientv3.ModRevision(s.k.compacted), "=", kvs[0].ModRevision)
	}
	manCmp := clientv3.Compare(clientv3.CreateRevision(s.k.manifest), "=", 0)
	if kvs := resp.Responses[1].GetResponseRange().Kvs; len(kvs) == 1 {
		manCmp = clientv3.Compare(clientv3.ModRevision(s.k.manifest), "=", kvs[0].ModRevision)
	}
	if before <= comp {
		s.setCompacted(comp)
		return nil
	}
	snapRev, data, err := s.snapshot()
	if err != nil {
		return err
	}
	chunks := split(data, s.cfg.ChunkBytes)
	for i, c := range chunks {
		if _, err := s.cli.Put(ctx, s.k.snapshotChunk(snapRev, i), string(c)); err != nil {
			return fmt.Errorf("etcdstore: compact: write snapshot chunk %d of %d: %w", i+1, len(chunks), err)
		}
	}
	man, err := json.Marshal(manifest{Rev: snapRev, Chunks: len(chunks), Bytes: len(data), SHA256: sum(data)})
	if err != nil {
		return fmt.Errorf("etcdstore: compact: %w", err)
	}
	tr, err := s.cli.Txn(ctx).If(compCmp, manCmp).Then(
		clientv3.OpPut(s.k.manifest, string(man)),
		clientv3.OpPut(s.k.compacted, strconv.FormatInt(int64(before), 10))).Commit()
	if err != nil {
		return fmt.Errorf("etcdstore: compact before %d: %w", before, err)
	}
	if !tr.Succeeded {
		return fmt.Errorf("etcdstore: compact before %d: another replica compacted meanwhile; retry", before)
	}
	s.setCompacted(before)
	s.log.Info("history compacted", "before", before, "snapshot_revision", snapRev, "snapshot_bytes", len(data))
	if err := s.sweep(ctx, before, snapRev); err != nil {
		// Harmless: readers ignore what is below l/compacted; the next compaction sweeps again.
		s.log.Warn("compaction: deleting old log records failed", "before", before, "error", err)
	}
	return nil
}

func (s *Store) setCompacted(c store.Revision) {
	s.stateMu.Lock()
	s.compacted = max(s.compacted, c)
	s.stateMu.Unlock()
}

// snapshot encodes every current object (sorted by key) at the local revision.
func (s *Store) snapshot() (store.Revision, []byte, error) {
	s.stateMu.RLock()
	rev, objs := s.rev, s.objects.List("", "")
	s.stateMu.RUnlock()
	data, err := json.Marshal(objs)
	if err != nil {
		return 0, nil, fmt.Errorf("etcdstore: compact: encode snapshot: %w", err)
	}
	return rev, data, nil
}

// sweep deletes the log records, chunk indexes and chunks below before and the
// snapshots older than snapRev, in transactions of at most MaxTxnOps deletes.
func (s *Store) sweep(ctx context.Context, before, snapRev store.Revision) error {
	idx, err := s.cli.Get(ctx, s.k.chunkIdx, clientv3.WithRange(s.k.chunkIndex(before)))
	if err != nil {
		return err
	}
	ops := []clientv3.Op{
		clientv3.OpDelete(s.k.records, clientv3.WithRange(s.k.record(before))),
		clientv3.OpDelete(s.k.chunkIdx, clientv3.WithRange(s.k.chunkIndex(before))),
		clientv3.OpDelete(s.k.snapshots, clientv3.WithRange(s.k.snapshotDir(snapRev))),
	}
	for _, kv := range idx.Kvs {
		ops = append(ops, clientv3.OpDelete(s.k.chunkDir(string(kv.Value)), clientv3.WithPrefix()))
	}
	// Chunks first, so an interrupted sweep leaves indexes pointing at them.
	for len(ops) > 0 {
		n := min(len(ops), s.cfg.MaxTxnOps)
		batch := ops[len(ops)-n:]
		if _, err := s.cli.Txn(ctx).Then(batch...).Commit(); err != nil {
			return err
		}
		ops = ops[:len(ops)-n]
	}
	return nil
}

// Close stops following the log and every watcher (their Err is
// store.ErrClosed), waits for in-flight applies and closes the etcd client.
// Later calls return store.ErrClosed.
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
	s.stop()
	close(s.done)
	s.wg.Wait()
	s.hub.Wait()
	if err := s.cli.Close(); err != nil {
		return fmt.Errorf("etcdstore: close client: %w", err)
	}
	s.log.Info("store closed", "prefix", s.cfg.Prefix)
	return nil
}
