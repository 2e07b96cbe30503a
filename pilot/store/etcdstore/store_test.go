package etcdstore

import (
	"context"
	"fmt"
	"sync/atomic"
	"testing"

	"go.uber.org/goleak"

	"github.com/weft-mesh/weft/pilot/store"
	"github.com/weft-mesh/weft/pilot/store/storetest"
	"github.com/weft-mesh/weft/tools/testkit/etcdtest"
)

// Every test runs in parallel (t.Parallel): each starts its own etcd cluster,
// and most of their time is waiting on leases, elections and fsyncs.
func TestMain(m *testing.M) { goleak.VerifyTestMain(m, goleak.Cleanup(etcdtest.Cleanup)) }

// suiteBuffer is small so the contract can overflow it with few revisions.
const suiteBuffer = 32

var prefixes atomic.Int64

// newPrefix is a fresh store on a shared cluster.
func newPrefix(t *testing.T) string {
	return fmt.Sprintf("/t%d/", prefixes.Add(1))
}

func openT(t *testing.T, c *etcdtest.Cluster, prefix string, mod ...func(*Config)) *Store {
	t.Helper()
	cfg := Config{Endpoints: c.Endpoints, Prefix: prefix, WatchBuffer: suiteBuffer}
	for _, m := range mod {
		m(&cfg)
	}
	s, err := Open(context.Background(), cfg)
	if err != nil {
		t.Fatalf("Open: %v", err)
	}
	return s
}

// flavours are the etcd servers pilot must work with.
var flavours = []struct {
	name string
	bin  func(t *testing.T) string
}{
	{"etcd3.4", func(t *testing.T) string { return etcdtest.RequireBinary(t, etcdtest.Etcd34Binary) }},
	{"etcd3.7", func(t *testing.T) string { return etcdtest.Etcd37Binary(t) }},
}

// TestContract runs the whole store contract, and the persistence contract
// (a new Store on the same prefix is the reopen), against a real 3-member
// cluster of each etcd version.
func TestContract(t *testing.T) {
	t.Parallel()
	for _, f := range flavours {
		t.Run(f.name, func(t *testing.T) {
			t.Parallel()
			c := etcdtest.Start(t, etcdtest.Options{Binary: f.bin(t)})
			storetest.Run(t, func(t *testing.T) store.Store { return openT(t, c, newPrefix(t)) })
			// Sets: two replicas on one prefix read what either wrote.
			t.Run("Sets", func(t *testing.T) {
				storetest.RunSets(t, func(t *testing.T) (store.Sets, store.Sets) {
					p := newPrefix(t)
					a, b := openT(t, c, p), openT(t, c, p)
					t.Cleanup(func() { a.Close(); b.Close() })
					return a, b
				})
			})
			t.Run("Persistent", func(t *testing.T) {
				prefixOf := map[string]string{}
				storetest.RunPersistent(t, func(t *testing.T, dir string) store.Store {
					if prefixOf[dir] == "" {
						prefixOf[dir] = newPrefix(t)
					}
					return openT(t, c, prefixOf[dir])
				})
			})
		})
	}
}
