package etcdstore

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"strings"
	"sync"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/weft-mesh/weft/pilot/store"
)

// Registrations are the registrations of the nodes connected to each replica,
// shared through etcd so every replica compiles the same endpoints: each
// replica writes its own under <prefix>registrations/<replica>/<node> on a
// lease of its own and watches everyone else's. A replica that is killed
// leaves with its lease: its registrations vanish at most the lease TTL after
// its last keep-alive (DefaultRegistrationTTL), plus the watch's delivery.
//
// The values are opaque here (pilot/xds/regshare encodes nodes). Put and
// Delete never block on etcd: they record what this replica wants and one
// writer goroutine makes etcd say so, retrying until it does; so a stream's
// Connect or Close does not wait on etcd.
type Registrations struct {
	s       *Store
	replica string
	ttl     time.Duration
	lim     RegistrationLimits

	mu      sync.Mutex
	local   map[string][]byte            // what this replica wants in etcd
	dirty   map[string]struct{}          // ids whose etcd key may differ from local
	remote  map[string]map[string]Remote // other replicas' registrations: replica -> node -> value
	kick    chan struct{}                // 1-buffered: dirty grew
	changed chan struct{}                // 1-buffered: remote changed
}

// Remote is one registration of another replica.
type Remote struct {
	Replica, ID string
	Value       []byte
	Revision    int64 // etcd mod revision: the newer of two registrations of one node wins
}

// RegistrationLimits bound what one replica shares and what it takes from
// another.
type RegistrationLimits struct {
	MaxEntries    int // registrations per replica (0: DefaultMaxRegistrations)
	MaxEntryBytes int // bytes per registration value (0: DefaultMaxRegistrationBytes)
}

// Defaults of the registration sharing.
const (
	// DefaultRegistrationTTL bounds how long a killed replica's registrations
	// outlive it.
	DefaultRegistrationTTL = 10 * time.Second
	// DefaultMaxRegistrations is per replica: the scale target is 10,000
	// proxies, spread over the replicas.
	DefaultMaxRegistrations = 20000
	// DefaultMaxRegistrationBytes bounds one encoded node: node.FromProto's
	// bounds (64 labels of at most 317+253 bytes) fit in it.
	DefaultMaxRegistrationBytes = 64 << 10
)

// ErrTooManyRegistrations: a Put of a new node past RegistrationLimits.MaxEntries.
var ErrTooManyRegistrations = errors.New("too many registrations on this replica")

func (k keys) registrations() string { return k.prefix + "registrations/" }

// ShareRegistrations starts sharing this replica's registrations under
// replica (unique per running replica) with a lease of ttl, and following the
// other replicas'. It returns once the lease is granted and the others' are
// listed; it runs until ctx ends or the store closes, then revokes its lease
// (a replica shut down cleanly takes its registrations at once).
func (s *Store) ShareRegistrations(ctx context.Context, replica string, ttl time.Duration, lim RegistrationLimits) (*Registrations, error) {
	switch {
	case replica == "" || strings.Contains(replica, "/"):
		return nil, fmt.Errorf("etcdstore: share registrations: replica id %q must be non-empty without '/'", replica)
	case ttl < MinReplicaTTL:
		return nil, fmt.Errorf("etcdstore: share registrations: TTL %s is below %s", ttl, MinReplicaTTL)
	case lim.MaxEntries < 0 || lim.MaxEntryBytes < 0:
		return nil, fmt.Errorf("etcdstore: share registrations: negative limits %+v", lim)
	}
	if lim.MaxEntries == 0 {
		lim.MaxEntries = DefaultMaxRegistrations
	}
	if lim.MaxEntryBytes == 0 {
		lim.MaxEntryBytes = DefaultMaxRegistrationBytes
	}
	if s.isClosed() {
		return nil, store.ErrClosed
	}
	r := &Registrations{s: s, replica: replica, ttl: ttl, lim: lim,
		local: map[string][]byte{}, dirty: map[string]struct{}{}, remote: map[string]map[string]Remote{},
		kick: make(chan struct{}, 1), changed: make(chan struct{}, 1)}
	actx, cancel := context.WithCancel(s.ctx)
	stop := context.AfterFunc(ctx, cancel)
	lease, keep, err := r.grant(actx)
	if err != nil {
		stop()
		cancel()
		return nil, err
	}
	rev, err := r.list(actx)
	if err != nil {
		stop()
		cancel()
		s.revoke(lease)
		return nil, err
	}
	s.wg.Add(2)
	go func() {
		defer s.wg.Done()
		defer stop()
		defer cancel()
		r.write(actx, lease, keep)
	}()
	go func() {
		defer s.wg.Done()
		r.follow(actx, rev)
	}()
	return r, nil
}

// Put records that node id is registered here with val.
func (r *Registrations) Put(id string, val []byte) error {
	if id == "" || strings.Contains(id, "/") {
		return fmt.Errorf("etcdstore: registration %q: node id must be non-empty without '/'", id)
	}
	if len(val) == 0 || len(val) > r.lim.MaxEntryBytes {
		return fmt.Errorf("etcdstore: registration %s: %d bytes, want 1 to %d", id, len(val), r.lim.MaxEntryBytes)
	}
	r.mu.Lock()
	if _, ok := r.local[id]; !ok && len(r.local) >= r.lim.MaxEntries {
		r.mu.Unlock()
		return fmt.Errorf("etcdstore: registration %s: %w (at most %d)", id, ErrTooManyRegistrations, r.lim.MaxEntries)
	}
	r.local[id] = val
	r.dirty[id] = struct{}{}
	r.mu.Unlock()
	poke(r.kick)
	return nil
}

// Delete records that node id is no longer registered here.
func (r *Registrations) Delete(id string) {
	r.mu.Lock()
	delete(r.local, id)
	r.dirty[id] = struct{}{}
	r.mu.Unlock()
	poke(r.kick)
}

// Remote lists the other replicas' registrations (at most MaxEntries of each).
func (r *Registrations) Remote() []Remote {
	r.mu.Lock()
	defer r.mu.Unlock()
	var out []Remote
	for _, m := range r.remote {
		for _, e := range m {
			out = append(out, e)
		}
	}
	return out
}

// Changed is signalled (coalesced) when Remote may have changed.
func (r *Registrations) Changed() <-chan struct{} { return r.changed }

func poke(c chan struct{}) {
	select {
	case c <- struct{}{}:
	default:
	}
}

func (r *Registrations) key(id string) string {
	return r.s.k.registrations() + r.replica + "/" + id
}

func (r *Registrations) grant(ctx context.Context) (clientv3.LeaseID, <-chan *clientv3.LeaseKeepAliveResponse, error) {
	rctx, cancel := context.WithTimeout(ctx, r.s.cfg.RequestTimeout)
	defer cancel()
	lease, err := r.s.cli.Grant(rctx, int64((r.ttl+time.Second-1)/time.Second))
	if err != nil {
		return 0, nil, fmt.Errorf("etcdstore: registrations of %s: lease: %w", r.replica, err)
	}
	keep, err := r.s.cli.KeepAlive(ctx, lease.ID)
	if err != nil {
		r.s.revoke(lease.ID)
		return 0, nil, fmt.Errorf("etcdstore: registrations of %s: keep-alive: %w", r.replica, err)
	}
	return lease.ID, keep, nil
}

// write makes etcd hold local: it writes the dirty ids on lease, and on a lost
// lease grants a new one and writes every local id again.
func (r *Registrations) write(ctx context.Context, lease clientv3.LeaseID, keep <-chan *clientv3.LeaseKeepAliveResponse) {
	defer func() { r.s.revoke(lease) }()
	for {
		select {
		case <-ctx.Done():
			return
		case _, ok := <-keep:
			if ok {
				continue // drained: clientv3 logs when keep-alive responses pile up
			}
			if ctx.Err() != nil {
				return
			}
			r.s.log.Warn("registrations lease lost; sharing them again on a new one", "replica", r.replica)
			for {
				var err error
				if lease, keep, err = r.grant(ctx); err == nil {
					break
				}
				select {
				case <-ctx.Done():
					return
				case <-time.After(retryBackoff):
				}
			}
			r.mu.Lock()
			for id := range r.local {
				r.dirty[id] = struct{}{}
			}
			r.mu.Unlock()
			poke(r.kick)
		case <-r.kick:
			if err := r.flush(ctx, lease); err != nil && ctx.Err() == nil {
				r.s.log.Warn("sharing registrations failed; retrying", "replica", r.replica, "error", err)
				select {
				case <-ctx.Done():
					return
				case <-time.After(retryBackoff):
				}
				poke(r.kick)
			}
		}
	}
}

// flush writes the dirty ids, at most maxTxnOps per request; what fails stays dirty.
func (r *Registrations) flush(ctx context.Context, lease clientv3.LeaseID) error {
	r.mu.Lock()
	batch := map[string][]byte{} // nil value: delete
	for id := range r.dirty {
		batch[id] = r.local[id]
		delete(r.dirty, id)
		if len(batch) == maxRegistrationOps {
			break
		}
	}
	more := len(r.dirty) > 0
	r.mu.Unlock()
	ops := make([]clientv3.Op, 0, len(batch))
	for id, v := range batch {
		if v == nil {
			ops = append(ops, clientv3.OpDelete(r.key(id)))
		} else {
			ops = append(ops, clientv3.OpPut(r.key(id), string(v), clientv3.WithLease(lease)))
		}
	}
	rctx, cancel := context.WithTimeout(ctx, r.s.cfg.RequestTimeout)
	_, err := r.s.cli.Txn(rctx).Then(ops...).Commit()
	cancel()
	if err != nil {
		r.mu.Lock()
		for id := range batch {
			r.dirty[id] = struct{}{}
		}
		r.mu.Unlock()
		return fmt.Errorf("etcdstore: write %d registrations of %s: %w", len(batch), r.replica, err)
	}
	if more {
		poke(r.kick)
	}
	return nil
}

// maxRegistrationOps stays below etcd's default --max-txn-ops (128).
const maxRegistrationOps = 100

// list reads every other replica's registrations into remote.
func (r *Registrations) list(ctx context.Context) (int64, error) {
	rctx, cancel := context.WithTimeout(ctx, r.s.cfg.RequestTimeout)
	defer cancel()
	resp, err := r.s.cli.Get(rctx, r.s.k.registrations(), clientv3.WithPrefix())
	if err != nil {
		return 0, fmt.Errorf("etcdstore: list registrations: %w", err)
	}
	next := map[string]map[string]Remote{}
	for _, kv := range resp.Kvs {
		r.take(next, string(kv.Key), kv.Value, kv.ModRevision)
	}
	r.mu.Lock()
	changed := !maps.EqualFunc(r.remote, next, func(a, b map[string]Remote) bool {
		return maps.EqualFunc(a, b, func(x, y Remote) bool { return x.Revision == y.Revision })
	})
	r.remote = next
	r.mu.Unlock()
	if changed {
		poke(r.changed)
	}
	return resp.Header.Revision, nil
}

// take adds one key's registration to m unless it is this replica's or past
// the limits (a replica of another build, or a hand-written key).
func (r *Registrations) take(m map[string]map[string]Remote, key string, val []byte, rev int64) {
	replica, id, ok := strings.Cut(strings.TrimPrefix(key, r.s.k.registrations()), "/")
	if !ok || replica == r.replica || id == "" {
		return
	}
	if len(val) > r.lim.MaxEntryBytes {
		r.s.log.Warn("ignoring a registration past the size bound", "key", key, "bytes", len(val), "max", r.lim.MaxEntryBytes)
		return
	}
	rm := m[replica]
	if rm == nil {
		rm = map[string]Remote{}
		m[replica] = rm
	}
	if _, ok := rm[id]; !ok && len(rm) >= r.lim.MaxEntries {
		r.s.log.Warn("ignoring a registration past the per-replica bound", "key", key, "max", r.lim.MaxEntries)
		return
	}
	rm[id] = Remote{Replica: replica, ID: id, Value: val, Revision: rev}
}

// follow watches the prefix from rev+1; a watch that fails (compacted, etcd
// gone, no leader) is resumed from a fresh list. Only the other replicas'
// events signal Changed: this replica's own are known to it already.
func (r *Registrations) follow(ctx context.Context, rev int64) {
	for ctx.Err() == nil {
		wctx, cancel := context.WithCancel(ctx)
		wch := r.s.cli.Watch(clientv3.WithRequireLeader(wctx), r.s.k.registrations(), clientv3.WithPrefix(), clientv3.WithRev(rev+1))
		for resp := range wch {
			if resp.Err() != nil {
				break
			}
			changed := false
			r.mu.Lock()
			for _, ev := range resp.Events {
				key := string(ev.Kv.Key)
				replica, id, _ := strings.Cut(strings.TrimPrefix(key, r.s.k.registrations()), "/")
				if replica == r.replica {
					continue
				}
				changed = true
				if ev.Type == clientv3.EventTypeDelete {
					if m := r.remote[replica]; m != nil {
						delete(m, id)
						if len(m) == 0 {
							delete(r.remote, replica)
						}
					}
					continue
				}
				r.take(r.remote, key, ev.Kv.Value, ev.Kv.ModRevision)
			}
			r.mu.Unlock()
			rev = resp.Header.Revision
			if changed {
				poke(r.changed)
			}
		}
		cancel() // ends the watch if it stopped on an error without closing
		for ctx.Err() == nil {
			var err error
			if rev, err = r.list(ctx); err == nil {
				break
			}
			r.s.log.Warn("listing registrations failed; retrying", "error", err)
			select {
			case <-ctx.Done():
				return
			case <-time.After(retryBackoff):
			}
		}
	}
}
