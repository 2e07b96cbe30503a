package ads

import (
	"context"
	"fmt"
	"os"
	"strconv"
	"testing"
	"time"

	discoveryv3 "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	"github.com/hashicorp/go-hclog"
	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/weft-mesh/weft/pilot/status"
	"github.com/weft-mesh/weft/pilot/xds/snapshot"
	"github.com/weft-mesh/weft/tools/testkit"
)

// BenchmarkFanout measures one endpoint change pushed to N delta clients (each its
// own stream over loopback gRPC, ACKing everything) until every ACK is processed.
// N comes from ADS_FANOUT_N (default 1000), streams per connection from
// ADS_FANOUT_PER_CONN (default 10); the mesh has 1000 services.
// tools/bench/adsload is the full load test (store write to ACK, SotW bytes, RSS).
func BenchmarkFanout(b *testing.B) {
	n := 1000
	if v, err := strconv.Atoi(os.Getenv("ADS_FANOUT_N")); err == nil && v > 0 {
		n = v
	}
	perConn := 10
	if v, err := strconv.Atoi(os.Getenv("ADS_FANOUT_PER_CONN")); err == nil && v > 0 {
		perConn = v
	}
	const services = 1000
	mk := func(rev int64, changed int) *snapshot.Snapshot {
		r := res{cds: {}, eds: {}}
		for i := range services {
			name := fmt.Sprintf("svc-%04d", i)
			r[cds][name] = "c"
			r[eds][name] = "e"
			if i == changed {
				r[eds][name] = fmt.Sprint("e", rev)
			}
		}
		return mkSnap(b, rev, r)
	}
	src := newFakeSource()
	src.publish(mk(1, -1))
	tr, err := status.New(status.Config{Logger: hclog.NewNullLogger(), Registerer: prometheus.NewRegistry(), Retention: time.Minute, MaxDisconnected: n, MaxRevisions: 16})
	if err != nil {
		b.Fatal(err)
	}
	cfg := testConfig()
	cfg.Source, cfg.Status, cfg.MaxSubscriptions = src, tr, 10000
	s, err := New(cfg)
	if err != nil {
		b.Fatal(err)
	}
	lis, err := netListen()
	if err != nil {
		b.Fatal(err)
	}
	g := grpc.NewServer()
	s.Register(g)
	go func() { _ = g.Serve(lis) }()
	defer g.Stop()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var conns []*grpc.ClientConn
	defer func() {
		for _, c := range conns {
			c.Close()
		}
	}()
	ready := make(chan struct{}, n)
	acked := make(chan struct{}, n) // one per client per measured change
	for i := range n {
		if i%perConn == 0 {
			c, err := grpc.NewClient(lis.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
			if err != nil {
				b.Fatal(err)
			}
			conns = append(conns, c)
		}
		st, err := discoveryv3.NewAggregatedDiscoveryServiceClient(conns[len(conns)-1]).DeltaAggregatedResources(ctx)
		if err != nil {
			b.Fatal(err)
		}
		go func() {
			_ = st.Send(&discoveryv3.DeltaDiscoveryRequest{Node: nodeProto(fmt.Sprint("p", i)), TypeUrl: cds, ResourceNamesSubscribe: []string{"*"}})
			_ = st.Send(&discoveryv3.DeltaDiscoveryRequest{TypeUrl: eds, ResourceNamesSubscribe: []string{"*"}})
			seen := 0
			for {
				r, err := st.Recv()
				if err != nil {
					return
				}
				if st.Send(&discoveryv3.DeltaDiscoveryRequest{TypeUrl: r.TypeUrl, ResponseNonce: r.Nonce}) != nil {
					return
				}
				if seen++; seen == 2 {
					ready <- struct{}{}
				} else if seen > 2 {
					acked <- struct{}{}
				}
			}
		}()
	}
	for range n {
		<-ready
	}
	// Outside the timed region (before ResetTimer, after StopTimer), so polling does
	// not count in the measurement.
	waitConverged := func(rev int64) {
		b.Helper()
		testkit.Wait(b, 30*time.Second, func() error {
			if rs := tr.Revision(rev); rs.Connected != n || !rs.Converged {
				return fmt.Errorf("revision %d: %+v, want %d connected and converged", rev, rs, n)
			}
			return nil
		})
	}
	waitConverged(1)
	snaps := make([]*snapshot.Snapshot, b.N)
	for i := range snaps {
		snaps[i] = mk(int64(i+2), i%services)
	}
	b.ResetTimer()
	for i := range b.N {
		src.publish(snaps[i])
		for range n {
			<-acked
		}
	}
	b.StopTimer()
	waitConverged(int64(b.N + 1))
	b.ReportMetric(float64(b.Elapsed().Microseconds())/float64(b.N)/float64(n), "µs/proxy")
}
