package xdsclient

import (
	"context"
	"fmt"
	"strconv"
	"testing"

	"google.golang.org/protobuf/proto"

	"github.com/weft-mesh/weft/sidecar/xdswire"
)

// BenchmarkHandle measures one full-state push of n clusters through decode,
// candidate build, (no-op) apply and commit: the client's cost per pilot push.
func BenchmarkHandle(b *testing.B) {
	for _, n := range []int{10, 1000} {
		ms := make([]proto.Message, n)
		for i := range ms {
			ms[i] = cluster("outbound|9080||svc-" + strconv.Itoa(i) + ".shop.svc.cluster.local")
		}
		b.Run(fmt.Sprintf("sotw/%d", n), func(b *testing.B) {
			e := benchEngine(b, SotW)
			resp := &xdswire.DiscoveryResponse{TypeUrl: TypeCluster, VersionInfo: "v"}
			for _, m := range ms {
				resp.Resources = append(resp.Resources, mustAny(b, m))
			}
			b.ReportAllocs()
			for i := 0; b.Loop(); i++ {
				resp.Nonce = strconv.Itoa(i)
				resp.VersionInfo = resp.Nonce // a new version each time, so nothing is memoised
				if reqs := e.handleSotW(context.Background(), resp); reqs[0].ErrorDetail != nil {
					b.Fatal(reqs[0].ErrorDetail)
				}
			}
		})
		b.Run(fmt.Sprintf("delta/%d", n), func(b *testing.B) {
			e := benchEngine(b, Delta)
			resp := &xdswire.DeltaDiscoveryResponse{TypeUrl: TypeCluster}
			for i, m := range ms {
				resp.Resources = append(resp.Resources, &xdswire.Resource{Name: ms[i].(interface{ GetName() string }).GetName(), Version: "1", Resource: mustAny(b, m)})
			}
			b.ReportAllocs()
			for i := 0; b.Loop(); i++ {
				resp.Nonce = strconv.Itoa(i)
				if reqs := e.handleDelta(context.Background(), resp); reqs[0].ErrorDetail != nil {
					b.Fatal(reqs[0].ErrorDetail)
				}
			}
		})
	}
}

func benchEngine(b *testing.B, mode Mode) *engine {
	cfg := testConfig(b, mode, &applier{})
	cfg.Apply = func(context.Context, *Update) error { return nil }
	e := newEngine(cfg.withDefaults())
	e.startStream()
	return e
}
