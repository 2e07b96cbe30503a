package etcdstore

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/weft-mesh/weft/pilot/store"
)

// Replica is one pilot replica on this store as it announces itself to the
// others, so that any replica's admin API can ask all of them (proxy status
// lives with the replica a proxy is connected to).
type Replica struct {
	ID       string    `json:"id"`
	AdminURL string    `json:"adminURL"` // how the other replicas reach its admin API
	Started  time.Time `json:"started"`
}

// DefaultReplicaTTL is how long a replica's announcement outlives it (its
// lease): a killed replica drops out of Replicas within it.
const DefaultReplicaTTL = 10 * time.Second

// MinReplicaTTL is the shortest TTL Announce takes (etcd raises shorter leases
// to about 1.5 election timeouts anyway).
const MinReplicaTTL = 2 * time.Second

func (k keys) replica(id string) string { return k.prefix + "replicas/" + id }

// Announce publishes r under <prefix>replicas/<r.ID> on a lease of ttl and
// keeps the lease alive until ctx ends or the store closes; if the lease is
// lost (etcd unreachable for longer than ttl) it announces again once etcd
// answers. It returns once the first announcement is written.
func (s *Store) Announce(ctx context.Context, r Replica, ttl time.Duration) error {
	if r.ID == "" || r.AdminURL == "" {
		return errors.New("etcdstore: announce: replica id and admin URL are required")
	}
	if ttl < MinReplicaTTL {
		return fmt.Errorf("etcdstore: announce: TTL %s is below %s", ttl, MinReplicaTTL)
	}
	val, err := json.Marshal(r)
	if err != nil {
		return fmt.Errorf("etcdstore: announce: %w", err)
	}
	if s.isClosed() {
		return store.ErrClosed
	}
	actx, cancel := context.WithCancel(s.ctx)
	stop := context.AfterFunc(ctx, cancel)
	lease, keep, err := s.announceOnce(actx, r.ID, string(val), ttl)
	if err != nil {
		stop()
		cancel()
		return err
	}
	s.wg.Add(1)
	go func() {
		defer s.wg.Done()
		defer stop()
		defer cancel()
		for {
			for range keep { // drained by us: clientv3 logs when keep-alive responses pile up
			}
			if actx.Err() != nil {
				s.revoke(lease) // a replica shut down cleanly leaves at once
				return
			}
			s.log.Warn("replica announcement lease lost; announcing again", "replica", r.ID)
			for {
				if lease, keep, err = s.announceOnce(actx, r.ID, string(val), ttl); err == nil {
					break
				}
				select {
				case <-actx.Done():
					return
				case <-time.After(retryBackoff):
				}
			}
		}
	}()
	return nil
}

func (s *Store) announceOnce(ctx context.Context, id, val string, ttl time.Duration) (clientv3.LeaseID, <-chan *clientv3.LeaseKeepAliveResponse, error) {
	rctx, cancel := context.WithTimeout(ctx, s.cfg.RequestTimeout)
	defer cancel()
	lease, err := s.cli.Grant(rctx, int64((ttl+time.Second-1)/time.Second))
	if err != nil {
		return 0, nil, fmt.Errorf("etcdstore: announce %s: lease: %w", id, err)
	}
	if _, err := s.cli.Put(rctx, s.k.replica(id), val, clientv3.WithLease(lease.ID)); err != nil {
		s.revoke(lease.ID)
		return 0, nil, fmt.Errorf("etcdstore: announce %s: %w", id, err)
	}
	keep, err := s.cli.KeepAlive(ctx, lease.ID)
	if err != nil {
		s.revoke(lease.ID)
		return 0, nil, fmt.Errorf("etcdstore: announce %s: keep-alive: %w", id, err)
	}
	return lease.ID, keep, nil
}

// Replicas lists the replicas whose announcements are alive, by id.
func (s *Store) Replicas(ctx context.Context) ([]Replica, error) {
	if s.isClosed() {
		return nil, store.ErrClosed
	}
	resp, err := s.cli.Get(ctx, s.k.prefix+"replicas/", clientv3.WithPrefix())
	if err != nil {
		return nil, fmt.Errorf("etcdstore: list replicas: %w", err)
	}
	out := make([]Replica, 0, len(resp.Kvs))
	for _, kv := range resp.Kvs {
		var r Replica
		if err := json.Unmarshal(kv.Value, &r); err != nil {
			return nil, fmt.Errorf("etcdstore: replica %s: %w", kv.Key, err)
		}
		out = append(out, r)
	}
	return out, nil
}
