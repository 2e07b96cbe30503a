package etcdstore

import (
	"context"
	"errors"
	"fmt"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/weft-mesh/weft/pilot/store"
)

// errResync ends a watch that cannot simply continue (a gap, etcd compacted past
// it, an undecodable record): the follow loop reads the log again.
var errResync = errors.New("resync")

// follow is the one goroutine that applies other replicas' revisions: it
// watches <prefix>l/ from etcd revision at+1 and, whenever the watch breaks
// (lost leader, etcd compaction, a gap), reads the log from the local head
// again and watches on from there. Its own Apply publishes its commits itself;
// records at or below the local revision are skipped.
func (s *Store) follow(at int64) {
	defer s.wg.Done()
	for {
		next, err := s.watchLog(at)
		if s.ctx.Err() != nil {
			return
		}
		s.log.Warn("following the etcd log: watch ended; reading the log again", "etcd_revision", next, "error", err)
		for {
			at, err = s.resync()
			if err == nil {
				break
			}
			s.log.Warn("following the etcd log: read failed; retrying", "error", err)
			select {
			case <-s.ctx.Done():
				return
			case <-time.After(retryBackoff):
			}
		}
	}
}

// watchLog consumes one etcd watch until it breaks and returns the last etcd
// revision it fully handled.
func (s *Store) watchLog(at int64) (int64, error) {
	// WithRequireLeader: a member cut off from the leader ends the watch (so we
	// move to another member) instead of going silent.
	ctx, cancel := context.WithCancel(clientv3.WithRequireLeader(s.ctx))
	defer cancel()
	for resp := range s.cli.Watch(ctx, s.k.log, clientv3.WithPrefix(), clientv3.WithRev(at+1)) {
		if resp.CompactRevision != 0 {
			return at, fmt.Errorf("etcd compacted its history to %d: %w", resp.CompactRevision, errResync)
		}
		if err := resp.Err(); err != nil {
			return at, err
		}
		for _, ev := range resp.Events {
			if err := s.handle(ctx, ev); err != nil {
				return at, err
			}
			at = ev.Kv.ModRevision
		}
	}
	return at, errors.New("watch channel closed")
}

// handle applies one watched key: a record (the next revision), l/compacted.
func (s *Store) handle(ctx context.Context, ev *clientv3.Event) error {
	key := string(ev.Kv.Key)
	if key == s.k.compacted && ev.Type == clientv3.EventTypePut {
		c, err := parseRevision(s.k.compacted, ev.Kv.Value)
		if err != nil {
			return err
		}
		s.stateMu.Lock()
		s.compacted = max(s.compacted, c)
		s.stateMu.Unlock()
		return nil
	}
	rev, ok := s.k.recordRevision(key)
	if !ok || ev.Type != clientv3.EventTypePut {
		return nil // the head (records drive), deletions by compaction
	}
	s.stateMu.RLock()
	cur := s.rev
	s.stateMu.RUnlock()
	if rev <= cur {
		return nil // published by this replica's own Apply
	}
	if rev != cur+1 {
		return fmt.Errorf("log: record %d after local revision %d: %w", rev, cur, errResync)
	}
	rctx, cancel := context.WithTimeout(ctx, s.cfg.RequestTimeout)
	defer cancel()
	evs, err := s.decodeRecord(rctx, rev, ev.Kv.Value, ev.Kv.ModRevision)
	if err != nil {
		return fmt.Errorf("%w: %w", err, errResync)
	}
	s.publish(cur, evs)
	return nil
}

// resync brings the local state up to etcd's head: by reading the log after the
// local revision, or, when that part of the log is compacted away, by loading
// the snapshot (every watcher is then cut with store.ErrCompacted, since it
// would miss revisions). It returns the etcd revision read at.
func (s *Store) resync() (int64, error) {
	ctx, cancel := context.WithTimeout(s.ctx, s.cfg.RequestTimeout)
	defer cancel()
	resp, err := s.cli.Txn(ctx).Then(clientv3.OpGet(s.k.head), clientv3.OpGet(s.k.compacted)).Commit()
	if err != nil {
		return 0, fmt.Errorf("read head: %w", err)
	}
	at := resp.Header.Revision
	var head, comp store.Revision
	if kvs := resp.Responses[0].GetResponseRange().Kvs; len(kvs) == 1 {
		if head, err = parseRevision(s.k.head, kvs[0].Value); err != nil {
			return 0, err
		}
	}
	if kvs := resp.Responses[1].GetResponseRange().Kvs; len(kvs) == 1 {
		if comp, err = parseRevision(s.k.compacted, kvs[0].Value); err != nil {
			return 0, err
		}
	}
	s.stateMu.RLock()
	cur := s.rev
	s.stateMu.RUnlock()
	if cur+1 >= comp {
		err := s.readRecords(ctx, cur, head, at, func(rev store.Revision, evs []store.Event) error {
			s.stateMu.RLock()
			now := s.rev
			s.stateMu.RUnlock()
			if rev > now { // this replica's Apply may have published it meanwhile
				s.publish(rev-1, evs)
			}
			return nil
		})
		if err == nil {
			s.stateMu.Lock()
			s.compacted = max(s.compacted, comp)
			s.stateMu.Unlock()
			return at, nil
		}
		if !errors.Is(err, errLogGap) {
			return 0, err
		}
	}
	st, at, err := s.read(ctx)
	if err != nil {
		return 0, err
	}
	s.stateMu.Lock()
	if st.rev < s.rev {
		s.stateMu.Unlock()
		return 0, fmt.Errorf("etcd's head %d is below this replica's revision %d", st.rev, s.rev)
	}
	s.log.Warn("this replica fell behind compaction: reloaded from the snapshot; watchers cut", "from", s.rev, "to", st.rev)
	s.objects, s.rev, s.compacted = st.objects, st.rev, st.compacted
	s.hub.CutAll(fmt.Errorf("replica reloaded at revision %d past compaction: %w", st.rev, store.ErrCompacted))
	close(s.advanced)
	s.advanced = make(chan struct{})
	s.stateMu.Unlock()
	return at, nil
}

// publish makes revision base+1 (evs) the local state if the state is still at
// base (the follow loop and this replica's Apply may both hold it) and queues it
// for every watcher under stateMu, so queues fill in revision order; wake-ups
// happen after the lock is released.
func (s *Store) publish(base store.Revision, evs []store.Event) {
	s.stateMu.Lock()
	if s.closed || s.rev != base {
		s.stateMu.Unlock()
		return
	}
	applyEvents(s.objects, evs)
	s.rev = base + 1
	close(s.advanced)
	s.advanced = make(chan struct{})
	wake, cut := s.hub.Publish(evs)
	s.stateMu.Unlock()
	for range cut {
		s.log.Warn("watcher cut off: buffer full", "revision", base+1, "buffer", s.cfg.WatchBuffer)
	}
	wake.Wake()
}
