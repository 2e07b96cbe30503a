package gen_test

import (
	"context"
	"fmt"
	"net"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	discoveryv3 "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	"github.com/envoyproxy/go-control-plane/pkg/cache/types"
	cachev3 "github.com/envoyproxy/go-control-plane/pkg/cache/v3"
	resourcev3 "github.com/envoyproxy/go-control-plane/pkg/resource/v3"
	serverv3 "github.com/envoyproxy/go-control-plane/pkg/server/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	testgrpc "google.golang.org/grpc/interop/grpc_testing"
	"google.golang.org/grpc/xds"

	"github.com/weft-mesh/weft/bootstrap/node"
	"github.com/weft-mesh/weft/pilot/compile"
	"github.com/weft-mesh/weft/pilot/resource"
	"github.com/weft-mesh/weft/pilot/xds/gen"
	"github.com/weft-mesh/weft/pilot/xds/snapshot"
	"github.com/weft-mesh/weft/tools/testkit"
)

// This file checks gen's output against a real, independent xDS client: grpc-go's
// proxyless resolver and balancers, fed by go-control-plane's ADS server (so the
// test depends on gen alone, not on our ADS server). The mesh uses every feature
// a proxyless client reads: subsets, weighted routes, header matches, timeouts,
// retries, fallback metadata, circuit breakers, outlier detection, RANDOM load
// balancing and HTTP/2 protocol options. grpc-go must ACK every type (a NACK
// fails the test with its error) and calls must reach both subsets.

const grpcGoTarget = "greeter.rpc.svc.cluster.local:50051"

type greeter struct {
	testgrpc.UnimplementedTestServiceServer
	id string
}

func (g *greeter) UnaryCall(context.Context, *testgrpc.SimpleRequest) (*testgrpc.SimpleResponse, error) {
	return &testgrpc.SimpleResponse{ServerId: g.id}, nil
}

// serve runs s on a loopback port until the test ends and returns the port.
func serve(t *testing.T, s *grpc.Server) int {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		_ = s.Serve(lis)
	}()
	t.Cleanup(func() {
		s.Stop()
		<-done
	})
	return lis.Addr().(*net.TCPAddr).Port
}

// cacheSnapshot is gen's snapshot as go-control-plane's.
func cacheSnapshot(t *testing.T, s *snapshot.Snapshot) *cachev3.Snapshot {
	t.Helper()
	res := map[resourcev3.Type][]types.Resource{}
	for typ, byName := range s.Resources {
		for _, r := range byName {
			m, err := r.Any.UnmarshalNew()
			if err != nil {
				t.Fatal(err)
			}
			res[typ] = append(res[typ], m)
		}
	}
	cs, err := cachev3.NewSnapshot("1", res)
	if err != nil {
		t.Fatal(err)
	}
	return cs
}

func richMeshYAML(v1Port, v2Port int) string {
	return fmt.Sprintf(`apiVersion: mesh.weft.dev/v1alpha1
kind: Service
metadata: {name: greeter, namespace: rpc}
spec:
  selector: {app: greeter}
  ports:
  - {name: grpc, port: 50051, protocol: GRPC}
---
apiVersion: mesh.weft.dev/v1alpha1
kind: Service
metadata: {name: greeter-backup, namespace: rpc}
spec:
  selector: {app: greeter, version: v2}
  ports:
  - {name: grpc, port: 50051, protocol: GRPC}
---
apiVersion: mesh.weft.dev/v1alpha1
kind: Workload
metadata: {name: greeter-v1, namespace: rpc, labels: {app: greeter, version: v1}}
spec: {address: 127.0.0.1, serviceAccount: greeter, locality: local/a, weight: 2, ports: {grpc: %d}}
---
apiVersion: mesh.weft.dev/v1alpha1
kind: Workload
metadata: {name: greeter-v2, namespace: rpc, labels: {app: greeter, version: v2}}
spec: {address: 127.0.0.1, serviceAccount: greeter, locality: local/b, ports: {grpc: %d}}
---
apiVersion: mesh.weft.dev/v1alpha1
kind: DestinationPolicy
metadata: {name: greeter, namespace: rpc}
spec:
  service: greeter
  subsets: [{name: v1, labels: {version: v1}}, {name: v2, labels: {version: v2}}]
  loadBalancer: RANDOM
  connectionPool: {maxConnections: 100, maxPendingRequests: 64, maxRequests: 1000, maxRetries: 3, retryBudget: {percent: 20, minConcurrency: 3}, connectTimeout: 1s}
  outlierDetection:
    consecutive5xx: 5
    consecutiveGatewayErrors: 3
    consecutiveLocalOriginFailures: 5
    splitExternalLocalOriginErrors: true
    successRate: {minHosts: 5, requestVolume: 100, stdevFactor: 1.9}
    failurePercentage: {threshold: 85, minHosts: 5, requestVolume: 50}
    interval: 10s
    baseEjectionTime: 30s
    maxEjectionTime: 300s
    maxEjectionTimeJitter: 2s
    maxEjectionPercent: 10
    minHealthPercent: 50
  localRateLimit: {requestsPerSecond: 100, burst: 200, dryRun: true}
---
apiVersion: mesh.weft.dev/v1alpha1
kind: DestinationPolicy
metadata: {name: greeter-backup, namespace: rpc}
spec:
  service: greeter-backup
  loadBalancer: LEAST_REQUEST
---
apiVersion: mesh.weft.dev/v1alpha1
kind: Route
metadata: {name: greeter, namespace: rpc}
spec:
  hosts: [greeter]
  http:
  - name: pinned
    match:
    - headers: {x-pin: {exact: v2}}
      path: {prefix: /grpc.testing.TestService/}
    route:
    - destination: {service: greeter, subset: v2}
  - name: split
    route:
    - destination: {service: greeter, subset: v1}
      weight: 50
    - destination: {service: greeter, subset: v2}
      weight: 50
    timeout: 5s
    retries: {attempts: 2, perTryTimeout: 1s, retryOn: [5xx, reset, connect-failure, cancelled, resource-exhausted], backoff: {baseInterval: 10ms, maxInterval: 80ms}}
    fallback:
    - destination: {service: greeter-backup}
`, v1Port, v2Port)
}

// nackRecorder is go-control-plane's request callback: it records every NACK
// and which types grpc-go has ACKed.
type nackRecorder struct {
	mu    sync.Mutex
	nacks []string
	acked map[string]bool
}

func (r *nackRecorder) onRequest(_ int64, req *discoveryv3.DiscoveryRequest) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	typ := req.GetTypeUrl()[strings.LastIndex(req.GetTypeUrl(), ".")+1:]
	switch {
	case req.GetErrorDetail() != nil:
		r.nacks = append(r.nacks, typ+": "+req.GetErrorDetail().GetMessage())
	case req.GetResponseNonce() != "":
		r.acked[typ] = true
	}
	return nil
}

func (r *nackRecorder) state() ([]string, map[string]bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	acked := map[string]bool{}
	for k, v := range r.acked {
		acked[k] = v
	}
	return append([]string(nil), r.nacks...), acked
}

func TestGRPCGoAcceptsProxylessSnapshot(t *testing.T) {
	v1s, v2s := grpc.NewServer(), grpc.NewServer()
	testgrpc.RegisterTestServiceServer(v1s, &greeter{id: "v1"})
	testgrpc.RegisterTestServiceServer(v2s, &greeter{id: "v2"})
	v1Port, v2Port := serve(t, v1s), serve(t, v2s)

	objs, err := resource.Decode([]byte(richMeshYAML(v1Port, v2Port)), "rich.yaml")
	if err != nil {
		t.Fatalf("decode: %v", err)
	}
	mesh, err := compile.Compile(compile.Input{Revision: 1, Objects: objs})
	if err != nil {
		t.Fatalf("compile: %v", err)
	}
	if len(mesh.Warnings) > 0 {
		t.Fatalf("compile warnings: %v", mesh.Warnings)
	}
	snap, err := gen.Proxy(mesh, &node.Node{ID: "grpc-client"})
	if err != nil {
		t.Fatal(err)
	}

	// Load gen's resources into go-control-plane's cache as they are.
	cs := cacheSnapshot(t, snap)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	// ads=false: in ADS mode go-control-plane answers only requests that name
	// every resource of the type, and a proxyless client names only what it uses.
	cache := cachev3.NewSnapshotCache(false, cachev3.IDHash{}, nil)
	if err := cache.SetSnapshot(ctx, "grpc-client", cs); err != nil {
		t.Fatal(err)
	}
	rec := &nackRecorder{acked: map[string]bool{}}
	xdsSrv := grpc.NewServer()
	discoveryv3.RegisterAggregatedDiscoveryServiceServer(xdsSrv, serverv3.NewServer(ctx, cache, serverv3.CallbackFuncs{StreamRequestFunc: rec.onRequest}))
	xdsPort := serve(t, xdsSrv)

	rb, err := xds.NewXDSResolverWithConfigForTesting([]byte(fmt.Sprintf(`{
  "xds_servers": [{"server_uri": "127.0.0.1:%d", "channel_creds": [{"type": "insecure"}], "server_features": ["xds_v3"]}],
  "node": {"id": "grpc-client", "locality": {"zone": "a"}}
}`, xdsPort)))
	if err != nil {
		t.Fatal(err)
	}
	cc, err := grpc.NewClient("xds:///"+grpcGoTarget, grpc.WithResolvers(rb), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer cc.Close()
	client := testgrpc.NewTestServiceClient(cc)

	// Calls reach both subsets of the 50/50 split; any NACK fails at once.
	seen := map[string]int{}
	var lastErr error
	testkit.Wait(t, 20*time.Second, func() error {
		nacks, acked := rec.state()
		if len(nacks) > 0 {
			t.Fatalf("grpc-go NACKed gen's output:\n%s", strings.Join(nacks, "\n"))
		}
		callCtx, callCancel := context.WithTimeout(ctx, 2*time.Second)
		r, err := client.UnaryCall(callCtx, &testgrpc.SimpleRequest{})
		callCancel()
		if err != nil {
			lastErr = err // resources still arriving
		} else {
			seen[r.GetServerId()]++
		}
		if len(seen) < 2 {
			return fmt.Errorf("calls did not reach both subsets: %v; last error: %v; acked: %v", seen, lastErr, acked)
		}
		return nil
	})
	// Every type is ACKed (the last ACK may still be in flight) and none NACKed.
	types := []string{"Listener", "RouteConfiguration", "Cluster", "ClusterLoadAssignment"}
	testkit.Wait(t, 10*time.Second, func() error {
		nacks, acked := rec.state()
		if len(nacks) > 0 {
			t.Fatalf("grpc-go NACKed gen's output:\n%s", strings.Join(nacks, "\n"))
		}
		if missing := slices.DeleteFunc(slices.Clone(types), func(typ string) bool { return acked[typ] }); len(missing) > 0 {
			return fmt.Errorf("grpc-go never ACKed %v (acked: %v)", missing, acked)
		}
		return nil
	})
	t.Logf("calls per subset: %v", seen)
}
