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
		// Proxies: a proxyless client, and per Service a sidecar that backs it.
		proxies := []*node.Node{{ID: "proxyless"}}
		for i, o := range objs {
			if s, ok := o.Spec.(*resource.ServiceSpec); ok {
				proxies = append(proxies, &node.Node{ID: fmt.Sprintf("s%d", i), Namespace: o.Metadata.Namespace,
					Address: fmt.Sprintf("10.250.%d.%d", i/250%250, i%250+1), Labels: s.Selector})
			}
		}
		mesh, err := compile.Compile(compile.Input{Revision: 1, Objects: objs, Proxies: proxies[1:]})
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
		}
	})
}
