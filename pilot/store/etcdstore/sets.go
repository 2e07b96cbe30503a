package etcdstore

import (
	"context"
	"fmt"
	"strings"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/weft-mesh/weft/pilot/store"
)

var _ store.Sets = (*Store)(nil)

// A set lives under <prefix>x/<set>/: its records under r/<name>, and rev, a
// marker re-put by every SetApply, whose ModRevision (etcd's revision, the same
// for every replica) is the set's revision. Outside l/, so the log follower
// never sees them.
func (k keys) setDir(set string) string     { return k.prefix + "x/" + set + "/" }
func (k keys) setRev(set string) string     { return k.setDir(set) + "rev" }
func (k keys) setRecords(set string) string { return k.setDir(set) + "r/" }

// SetApply is store.Sets: one etcd transaction (at most store.MaxSetApply + 1
// operations, under etcd's default --max-txn-ops).
func (s *Store) SetApply(ctx context.Context, set string, put []store.SetRecord, del []string) (store.Revision, error) {
	if err := store.ValidateSetApply(set, put, del); err != nil {
		return 0, err
	}
	if s.isClosed() {
		return 0, store.ErrClosed
	}
	ops := make([]clientv3.Op, 0, len(put)+len(del)+1)
	for _, r := range put {
		ops = append(ops, clientv3.OpPut(s.k.setRecords(set)+r.Name, string(r.Value)))
	}
	for _, name := range del {
		ops = append(ops, clientv3.OpDelete(s.k.setRecords(set)+name))
	}
	ops = append(ops, clientv3.OpPut(s.k.setRev(set), ""))
	rctx, cancel := context.WithTimeout(ctx, s.cfg.RequestTimeout)
	defer cancel()
	resp, err := s.cli.Txn(rctx).Then(ops...).Commit()
	if err != nil {
		return 0, fmt.Errorf("etcdstore: set %s: apply: %w", set, err)
	}
	return store.Revision(resp.Header.Revision), nil
}

// SetList is store.Sets: one linearizable range read of the set's keys.
func (s *Store) SetList(ctx context.Context, set string) ([]store.SetRecord, store.Revision, error) {
	if err := checkReadSet(set); err != nil {
		return nil, 0, err
	}
	if s.isClosed() {
		return nil, 0, store.ErrClosed
	}
	rctx, cancel := context.WithTimeout(ctx, s.cfg.RequestTimeout)
	defer cancel()
	resp, err := s.cli.Get(rctx, s.k.setDir(set), clientv3.WithPrefix(), clientv3.WithSort(clientv3.SortByKey, clientv3.SortAscend))
	if err != nil {
		return nil, 0, fmt.Errorf("etcdstore: set %s: list: %w", set, err)
	}
	var rev store.Revision
	out := make([]store.SetRecord, 0, len(resp.Kvs))
	recs := s.k.setRecords(set)
	for _, kv := range resp.Kvs {
		switch k := string(kv.Key); {
		case k == s.k.setRev(set):
			rev = store.Revision(kv.ModRevision)
		case strings.HasPrefix(k, recs):
			out = append(out, store.SetRecord{Name: k[len(recs):], Value: kv.Value})
		}
	}
	return out, rev, nil
}

// SetRevision is store.Sets: one linearizable read of the marker.
func (s *Store) SetRevision(ctx context.Context, set string) (store.Revision, error) {
	if err := checkReadSet(set); err != nil {
		return 0, err
	}
	if s.isClosed() {
		return 0, store.ErrClosed
	}
	rctx, cancel := context.WithTimeout(ctx, s.cfg.RequestTimeout)
	defer cancel()
	resp, err := s.cli.Get(rctx, s.k.setRev(set))
	if err != nil {
		return 0, fmt.Errorf("etcdstore: set %s: revision: %w", set, err)
	}
	if len(resp.Kvs) == 0 {
		return 0, nil
	}
	return store.Revision(resp.Kvs[0].ModRevision), nil
}

// checkReadSet validates a set name for a read (as SetApply would).
func checkReadSet(set string) error {
	return store.ValidateSetApply(set, nil, []string{"x"})
}
