package gen

import (
	"fmt"
	"runtime"
	"testing"
	"time"

	"github.com/weft-mesh/weft/bootstrap/node"
	"github.com/weft-mesh/weft/pilot/compile"
	"github.com/weft-mesh/weft/pilot/resource"
	"github.com/weft-mesh/weft/pilot/xds/snapshot"
	"github.com/weft-mesh/weft/sidecar/xdsresource"
)

// FuzzCompileGen feeds user YAML through the real path (resource.Decode, then
// compile, then gen): whatever Decode accepts must compile, and every proxy's
// snapshot must be consistent. Seeds in testdata/fuzz/FuzzCompileGen are the
// golden inputs' resources. Run it with a small -fuzzminimizetime (e.g. 200x):
// the default 60s per new input makes progress look stalled.
func FuzzCompileGen(f *testing.F) {
	f.Fuzz(func(t *testing.T, data []byte) {
		if len(data) > 64<<10 {
			return
		}
		// Limit: one input (<= 64 KiB) must decode, compile and generate in
		// well under 3s. A slow input panics with every goroutine's stack so
		// the fuzzer records it as a crasher instead of silently stalling.
		done := make(chan struct{})
		defer close(done)
		go func() {
			select {
			case <-done:
			case <-time.After(3 * time.Second):
				buf := make([]byte, 1<<20)
				n := runtime.Stack(buf, true)
				panic(fmt.Sprintf("slow input (>3s):\n%s", buf[:n]))
			}
		}()
		objs, err := resource.Decode(data, "fuzz.yaml")
		if err != nil {
			return
		}
		// Proxies: proxyless clients with and without an identity, and per
		// Service a sidecar that backs it (every other one with its identity,
		// so TLS chains and transport sockets are generated too), and per
		// Workload a proxyless server at its address with its identity.
		proxies := []*node.Node{{ID: "proxyless"}, {ID: "proxyless-id", Identity: "spiffe://cluster.local/ns/fuzz/sa/client"}}
		for i, o := range objs {
			switch s := o.Spec.(type) {
			case *resource.ServiceSpec:
				n := &node.Node{ID: fmt.Sprintf("s%d", i), Namespace: o.Metadata.Namespace,
					Address: fmt.Sprintf("10.250.%d.%d", i/250%250, i%250+1), Labels: s.Selector}
				if i%2 == 0 {
					n.Identity = "spiffe://cluster.local/ns/" + n.Namespace + "/sa/default"
				}
				proxies = append(proxies, n)
			case *resource.WorkloadSpec:
				sa := s.ServiceAccount
				if sa == "" {
					sa = "default"
				}
				proxies = append(proxies, &node.Node{ID: fmt.Sprintf("w%d", i), Address: s.Address, Proxyless: true,
					Identity: "spiffe://cluster.local/ns/" + o.Metadata.Namespace + "/sa/" + sa})
			}
		}
		mesh, err := compile.Compile(compile.Input{Revision: 1, Objects: objs, Proxies: proxies[2:]})
		if err != nil {
			t.Fatalf("Decode accepted what compile rejects: %v", err)
		}
		for _, p := range proxies {
			s, err := Proxy(mesh, p)
			if err != nil {
				t.Fatalf("Proxy(%s): %v", p.ID, err)
			}
			if err := Consistent(s); err != nil {
				t.Fatalf("Proxy(%s) inconsistent: %v", p.ID, err)
			}
			// Whatever StalenessPolicy Decode accepts reaches a sidecar as a
			// policy the sidecar's own decoder accepts.
			for _, r := range s.Resources[snapshot.StalenessType] {
				if _, _, err := xdsresource.Decode(snapshot.StalenessType, r.Any); err != nil {
					t.Fatalf("Proxy(%s): sidecar refuses its staleness policy: %v", p.ID, err)
				}
			}
			// And every sidecar snapshot (TLS, RBAC, overrides) is one the
			// sidecar accepts whole.
			if p.Registers() {
				if err := sidecarAccepts(s); err != nil {
					t.Fatalf("Proxy(%s): the sidecar refuses its snapshot: %v", p.ID, err)
				}
			}
		}
	})
}
