package resilience

import (
	"context"
	"fmt"
	"net"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	testgrpc "google.golang.org/grpc/interop/grpc_testing"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/grpc/xds"

	"github.com/weft-mesh/weft/conformance/internal/drillkit"
	"github.com/weft-mesh/weft/tools/testkit"
)

// The referee drill (issue #8): grpc-go's own xDS client, proxyless, and a Weft
// sidecar are both configured by one pilot for the same three gRPC backends
// with the same DestinationPolicy. One backend starts failing every call with
// UNAVAILABLE: grpc-go's outlier detection (gRFC A50: success rate and failure
// percentage) and the sidecar's both eject it. Failure percentage is the
// detector both implement, so it is the one configured.

const (
	grpcPort   = 50051
	clientKey  = "x-drill-client" // metadata naming which client made a call
	viaGRPCGo  = "grpc-go"
	viaSidecar = "sidecar"
)

// grpcBackend is a gRPC server answering UnaryCall with its name, or
// UNAVAILABLE when failing; it records every call's arrival per client.
type grpcBackend struct {
	testgrpc.UnimplementedTestServiceServer
	name, ip string
	mu       sync.Mutex
	failing  bool
	calls    map[string][]time.Time // client -> arrivals
}

func (b *grpcBackend) UnaryCall(ctx context.Context, _ *testgrpc.SimpleRequest) (*testgrpc.SimpleResponse, error) {
	md, _ := metadata.FromIncomingContext(ctx)
	client := "?"
	if v := md.Get(clientKey); len(v) > 0 {
		client = v[0]
	}
	b.mu.Lock()
	b.calls[client] = append(b.calls[client], time.Now())
	failing := b.failing
	b.mu.Unlock()
	if failing {
		return nil, status.Error(codes.Unavailable, b.name+" failing")
	}
	return &testgrpc.SimpleResponse{ServerId: b.name}, nil
}

func (b *grpcBackend) setFailing(f bool) { b.mu.Lock(); b.failing = f; b.mu.Unlock() }

// last is the last call from client, zero if none.
func (b *grpcBackend) last(client string) time.Time {
	b.mu.Lock()
	defer b.mu.Unlock()
	c := b.calls[client]
	if len(c) == 0 {
		return time.Time{}
	}
	return c[len(c)-1]
}

// since counts calls from client at or after t.
func (b *grpcBackend) since(client string, t time.Time) int {
	b.mu.Lock()
	defer b.mu.Unlock()
	n := 0
	for _, a := range b.calls[client] {
		if !a.Before(t) {
			n++
		}
	}
	return n
}

func startGRPCBackends(t *testing.T, base string, names ...string) []*grpcBackend {
	t.Helper()
	var bs []*grpcBackend
	for i, name := range names {
		b := &grpcBackend{name: name, ip: fmt.Sprintf("%s.%d", base, 11+i), calls: map[string][]time.Time{}}
		ln, err := net.Listen("tcp", fmt.Sprintf("%s:%d", b.ip, grpcPort))
		if err != nil {
			t.Fatal(err)
		}
		gs := grpc.NewServer()
		testgrpc.RegisterTestServiceServer(gs, b)
		done := make(chan struct{})
		go func() { defer close(done); _ = gs.Serve(ln) }()
		t.Cleanup(func() { gs.Stop(); <-done })
		bs = append(bs, b)
	}
	return bs
}

// grpcMeshYAML: Service greeter (GRPC, port 50051) with one Workload per
// backend and the DestinationPolicy both clients follow.
func grpcMeshYAML(bs []*grpcBackend) string {
	y := fmt.Sprintf(`apiVersion: mesh.weft.dev/v1alpha1
kind: Service
metadata: {name: greeter, namespace: shop}
spec:
  selector: {app: greeter}
  ports: [{name: grpc, port: %d, targetPort: %d, protocol: GRPC}]
`, grpcPort, grpcPort)
	for _, b := range bs {
		y += fmt.Sprintf(`---
apiVersion: mesh.weft.dev/v1alpha1
kind: Workload
metadata: {name: %s, namespace: shop, labels: {app: greeter}}
spec: {address: %s, serviceAccount: greeter}
`, b.name, b.ip)
	}
	return y + policyYAML("greeter", `connectionPool: {maxRequests: 1000}
outlierDetection:
  failurePercentage: {threshold: 50, minHosts: 3, requestVolume: 10}
  interval: 1s
  baseEjectionTime: 30s
  maxEjectionPercent: 34
`)
}

func TestRefereeGRPCGoAndSidecarEject(t *testing.T) {
	const base = "127.81.6"
	bs := startGRPCBackends(t, base, "greeter-a", "greeter-b", "greeter-c")
	bad := bs[2]
	ip := base + ".1"
	p := drillkit.StartPilot(t, ip)
	rev := p.ApplyRev(grpcMeshYAML(bs))
	w := drillkit.Workload{IP: ip, NodeID: "productpage-a", StateDir: filepath.Join(t.TempDir(), "state"), KeyFile: p.KeyFile()}
	sc := drillkit.StartSidecar(t, w, p.Addr())
	sc.WaitReady(30 * time.Second)
	testkit.Eventually(t, 30*time.Second, fmt.Sprintf("revision %d active on the sidecar", rev), func() bool {
		return sc.ConfigDump().Revision >= rev
	})

	// grpc-go, proxyless, through pilot.
	rb, err := xds.NewXDSResolverWithConfigForTesting([]byte(`{
  "xds_servers": [{"server_uri": "` + p.Addr() + `", "channel_creds": [{"type": "insecure"}], "server_features": ["xds_v3"]}],
  "node": {"id": "grpc-referee", "cluster": "drills", "locality": {"zone": "a"}}
}`))
	if err != nil {
		t.Fatal(err)
	}
	direct, err := grpc.NewClient(fmt.Sprintf("xds:///greeter.shop.svc.cluster.local:%d", grpcPort),
		grpc.WithResolvers(rb), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer direct.Close()
	// The same calls through the sidecar's outbound listener (h2c), by the Service's name.
	viaSC, err := grpc.NewClient("passthrough:///"+w.Outbound(), grpc.WithAuthority(fmt.Sprintf("greeter:%d", grpcPort)),
		grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer viaSC.Close()

	type client struct {
		name     string
		c        testgrpc.TestServiceClient
		mu       sync.Mutex
		ok       map[string]int // successful calls per backend since reset
		fail     int
		firstErr error // the first failure since reset
	}
	clients := []*client{{name: viaGRPCGo, c: testgrpc.NewTestServiceClient(direct)}, {name: viaSidecar, c: testgrpc.NewTestServiceClient(viaSC)}}
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	defer func() { cancel(); wg.Wait() }()
	for _, c := range clients {
		c.ok = map[string]int{}
		wg.Add(1)
		go func() {
			defer wg.Done()
			mctx := metadata.AppendToOutgoingContext(ctx, clientKey, c.name)
			// 100 calls per second, paced: each client alone keeps every backend
			// above the detector's request volume each interval.
			tick := time.NewTicker(10 * time.Millisecond)
			defer tick.Stop()
			for {
				select {
				case <-ctx.Done():
					return
				case <-tick.C:
				}
				cctx, ccancel := context.WithTimeout(mctx, 5*time.Second)
				r, err := c.c.UnaryCall(cctx, &testgrpc.SimpleRequest{})
				ccancel()
				if ctx.Err() != nil {
					return // ended by the test, not failed
				}
				c.mu.Lock()
				if err != nil {
					if c.fail++; c.firstErr == nil {
						c.firstErr = fmt.Errorf("at %s: %w", time.Now().Format("15:04:05.000"), err)
					}
				} else {
					c.ok[r.GetServerId()]++
				}
				c.mu.Unlock()
			}
		}()
	}
	start := time.Now()
	testkit.Eventually(t, 30*time.Second, "both clients reaching all three backends", func() bool {
		for _, c := range clients {
			for _, b := range bs {
				if b.since(c.name, start) == 0 {
					return false
				}
			}
		}
		return true
	})

	failAt := time.Now()
	bad.setFailing(true)
	// Both stop sending to it: no call from either for two intervals.
	const quiet = 2 * time.Second
	stopped := map[string]time.Time{}
	testkit.Wait(t, 30*time.Second, func() error {
		for _, c := range clients {
			last := bad.last(c.name)
			if last.Before(failAt) || time.Since(last) < quiet {
				return fmt.Errorf("%s still sends to the failing %s: %d calls since it began failing, the last %s ago",
					c.name, bad.name, bad.since(c.name, failAt), time.Since(last).Round(time.Millisecond))
			}
			stopped[c.name] = last
		}
		return nil
	})
	// From then on each client's calls succeed, spread over the two good backends.
	for _, c := range clients {
		c.mu.Lock()
		c.ok, c.fail, c.firstErr = map[string]int{}, 0, nil
		c.mu.Unlock()
	}
	from := time.Now()
	testkit.Eventually(t, 20*time.Second, "a second more of calls", func() bool { return time.Since(from) > time.Second })
	cancel()
	wg.Wait()
	for _, c := range clients {
		t.Logf("%s: last call to %s %s after it began failing; after that %d calls to it; then: ok per backend %v, %d failed",
			c.name, bad.name, stopped[c.name].Sub(failAt).Round(time.Millisecond), bad.since(c.name, stopped[c.name].Add(time.Nanosecond)), c.ok, c.fail)
		if n := bad.since(c.name, stopped[c.name].Add(time.Nanosecond)); n != 0 {
			t.Errorf("%s sent %d calls to the failing backend after it stopped", c.name, n)
		}
		if c.fail != 0 || c.ok[bs[0].name] == 0 || c.ok[bs[1].name] == 0 {
			t.Errorf("%s after the ejection: ok %v, %d failed (first %v); want every call answered by the two healthy backends", c.name, c.ok, c.fail, c.firstErr)
		}
	}
}
