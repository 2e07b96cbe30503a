// Package regshare shares the registrations of sidecars between pilot
// replicas on one etcd (meshcache.Shared over etcdstore.Registrations): a
// sidecar connected to replica B is an endpoint in the EDS replica A serves.
// Each node is encoded as the fields compile reads (JSON of node.Node: id,
// namespace, service account, verified identity, labels, address, inbound
// port, interception, locality). The identity was verified by the replica the
// node is connected to; replicas trust each other through etcd as they do
// for the whole store.
//
// A node registered on two replicas (it reconnected, and the old replica has
// not seen its stream end yet) appears once: the local registration wins
// (meshcache), and between two other replicas the newer write (etcd mod
// revision) wins.
package regshare

import (
	"encoding/json"
	"fmt"
	"sync"

	"github.com/hashicorp/go-hclog"

	"github.com/weft-mesh/weft/bootstrap/node"
	"github.com/weft-mesh/weft/pilot/store/etcdstore"
	"github.com/weft-mesh/weft/pilot/xds/meshcache"
)

// Shared implements meshcache.Shared.
type Shared struct {
	regs *etcdstore.Registrations
	log  hclog.Logger

	mu      sync.Mutex
	decoded map[string]decoded // replica + "/" + id -> the node decoded at a revision
}

type decoded struct {
	rev  int64
	node *node.Node // nil: the value did not decode (logged once per revision)
}

var _ meshcache.Shared = (*Shared)(nil)

// New shares through regs.
func New(regs *etcdstore.Registrations, log hclog.Logger) *Shared {
	return &Shared{regs: regs, log: log, decoded: map[string]decoded{}}
}

// Publish implements meshcache.Shared.
func (s *Shared) Publish(n *node.Node) error {
	b, err := json.Marshal(n)
	if err != nil {
		return fmt.Errorf("regshare: encode node %s: %w", n.ID, err)
	}
	return s.regs.Put(n.ID, b)
}

// Withdraw implements meshcache.Shared.
func (s *Shared) Withdraw(id string) { s.regs.Delete(id) }

// Changed implements meshcache.Shared.
func (s *Shared) Changed() <-chan struct{} { return s.regs.Changed() }

// Remote implements meshcache.Shared: one node per id, the newest write.
func (s *Shared) Remote() []*node.Node {
	list := s.regs.Remote()
	s.mu.Lock()
	defer s.mu.Unlock()
	seen := make(map[string]struct{}, len(list))
	type pick struct {
		rev  int64
		node *node.Node
	}
	byID := map[string]pick{}
	for _, e := range list {
		k := e.Replica + "/" + e.ID
		seen[k] = struct{}{}
		d, ok := s.decoded[k]
		if !ok || d.rev != e.Revision {
			d = decoded{rev: e.Revision, node: decode(e)}
			if d.node == nil {
				s.log.Warn("ignoring a shared registration that does not decode as a node", "replica", e.Replica, "node", e.ID)
			}
			s.decoded[k] = d
		}
		if d.node == nil {
			continue
		}
		if cur, ok := byID[e.ID]; !ok || e.Revision > cur.rev {
			byID[e.ID] = pick{rev: e.Revision, node: d.node}
		}
	}
	for k := range s.decoded {
		if _, ok := seen[k]; !ok {
			delete(s.decoded, k)
		}
	}
	out := make([]*node.Node, 0, len(byID))
	for _, p := range byID {
		out = append(out, p.node)
	}
	return out
}

// decode returns e's node, or nil when it is not one registered under its id.
func decode(e etcdstore.Remote) *node.Node {
	var n node.Node
	if err := json.Unmarshal(e.Value, &n); err != nil || n.ID != e.ID {
		return nil
	}
	return &n
}
