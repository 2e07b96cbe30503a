package grpcxds

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/connectivity"
	"google.golang.org/grpc/credentials/insecure"
	testgrpc "google.golang.org/grpc/interop/grpc_testing"
	grpcstatus "google.golang.org/grpc/status"
	"google.golang.org/grpc/xds"

	"github.com/weft-mesh/weft/pilot/server/servertest"
	"github.com/weft-mesh/weft/tools/testkit"
)

// resiliencePolicy sets every circuit-breaker and outlier-detection field the API
// has (and a dry-run rate limit), so the CDS pilot sends carries all of them.
// maxRequests 2 and failurePercentage (interval 1s) are what grpc-go enforces
// (max_requests; gRFC A50), so the test can watch it do so.
const resiliencePolicy = `---
apiVersion: mesh.weft.dev/v1alpha1
kind: DestinationPolicy
metadata: {name: greeter, namespace: rpc}
spec:
  service: greeter
  connectionPool: {maxConnections: 100, maxPendingRequests: 64, maxRequests: 2, maxRetries: 3, retryBudget: {percent: 20, minConcurrency: 3}, connectTimeout: 1s}
  outlierDetection:
    consecutive5xx: 5
    consecutiveGatewayErrors: 3
    consecutiveLocalOriginFailures: 5
    splitExternalLocalOriginErrors: true
    successRate: {minHosts: 3, requestVolume: 10, stdevFactor: 1.9}
    failurePercentage: {threshold: 50, minHosts: 3, requestVolume: 10}
    interval: 1s
    baseEjectionTime: 30s
    maxEjectionTime: 300s
    maxEjectionTimeJitter: 1s
    maxEjectionPercent: 34
    minHealthPercent: 50
  localRateLimit: {requestsPerSecond: 1000, burst: 100, dryRun: true}
`

// TestGRPCClientAcceptsResiliencePolicy is the referee for issue #8's CDS: grpc-go's
// xDS client ACKs the clusters pilot generates for a DestinationPolicy with
// circuit breakers and outlier detection (pilot's status: SYNCED, no NACK), the
// channel is READY, and grpc-go enforces what it implements of it: the third
// concurrent call over maxRequests 2 fails at once, and a backend that fails every
// call is ejected by failure-percentage detection, so calls stop reaching it.
func TestGRPCClientAcceptsResiliencePolicy(t *testing.T) {
	p := servertest.Start(t, servertest.Options{})
	b1, b2, bad := startBackend(t, "backend-1"), startBackend(t, "backend-2"), startBackend(t, "backend-3")
	rev := p.Apply(t, meshYAML(b1, b2, bad)+resiliencePolicy)

	rb, err := xds.NewXDSResolverWithConfigForTesting(bootstrap(p.XDSAddr))
	if err != nil {
		t.Fatal(err)
	}
	cc, err := grpc.NewClient(target, grpc.WithResolvers(rb), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer cc.Close()
	client := testgrpc.NewTestServiceClient(cc)
	call := func(ctx context.Context, body string) (string, error) {
		ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		defer cancel()
		r, err := client.UnaryCall(ctx, &testgrpc.SimpleRequest{Payload: &testgrpc.Payload{Body: []byte(body)}})
		if err != nil {
			return "", err
		}
		return r.GetServerId(), nil
	}

	// Accepted: calls reach all three backends, pilot sees all four types SYNCED
	// at the policy's revision, and grpc-go never NACKed.
	seen := map[string]int{}
	var lastErr error
	testkit.Wait(t, 20*time.Second, func() error {
		if id, err := call(context.Background(), ""); err != nil {
			lastErr = err
		} else {
			seen[id]++
		}
		if len(seen) < 3 {
			return fmt.Errorf("calls did not reach all three backends: %v (last error: %v)", seen, lastErr)
		}
		return nil
	})
	waitSynced(t, p, rev)
	if s := cc.GetState(); s != connectivity.Ready {
		t.Errorf("channel state %v, want READY", s)
	}
	noNACKs(t, p)

	// maxRequests 2: with two calls held at the backends, a third fails at once
	// with grpc-go's circuit-breaking error; after release calls succeed again.
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	heldErrs := make(chan error, 2)
	for range 2 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			_, err := call(ctx, holdPayload)
			heldErrs <- err
		}()
	}
	for range 2 {
		select {
		case <-b1.held:
		case <-b2.held:
		case <-bad.held:
		case <-time.After(10 * time.Second):
			cancel()
			wg.Wait()
			t.Fatal("two calls were not held at the backends within 10s")
		}
	}
	start := time.Now()
	_, err = call(context.Background(), "")
	took := time.Since(start)
	close(b1.release)
	close(b2.release)
	close(bad.release)
	wg.Wait()
	cancel()
	close(heldErrs)
	for err := range heldErrs {
		if err != nil {
			t.Errorf("held call: %v", err)
		}
	}
	if grpcstatus.Code(err) != codes.Unavailable || !strings.Contains(err.Error(), "max requests 2 exceeded") {
		t.Fatalf("third concurrent call over maxRequests 2: error %v, want UNAVAILABLE max requests 2 exceeded", err)
	}
	t.Logf("third concurrent call refused in %v: %v", took, err)
	if _, err := call(context.Background(), ""); err != nil {
		t.Fatalf("call after the held ones finished: %v", err)
	}

	// Failure percentage: backend-3 now fails every call. Within a few intervals
	// grpc-go ejects it (maxEjectionPercent 34 allows one of three): then 200
	// calls in a row all succeed on the other two.
	bad.fail.Store(true)
	failedAt := time.Now()
	var ejectedAfter time.Duration
	testkit.Wait(t, 15*time.Second, func() error {
		for i := range 200 {
			if _, err := call(context.Background(), ""); err != nil {
				return fmt.Errorf("call %d of a run of 200: %v", i, err)
			}
		}
		ejectedAfter = time.Since(failedAt)
		return nil
	})
	before := bad.calls.Load()
	for range 200 {
		if _, err := call(context.Background(), ""); err != nil {
			t.Fatalf("call after the ejection: %v", err)
		}
	}
	if n := bad.calls.Load() - before; n != 0 {
		t.Errorf("the ejected backend still got %d of 200 calls", n)
	}
	t.Logf("failing backend ejected by grpc-go within %v", ejectedAfter)
	noNACKs(t, p)
}

func noNACKs(t *testing.T, p *servertest.Pilot) {
	t.Helper()
	if page := p.Metrics(t); strings.Contains(page, "weft_pilot_xds_nacks_total{") {
		t.Errorf("grpc-go NACKed a response:\n%s", page)
	}
	if ps, ok := p.Proxy(t, nodeID); ok {
		for _, ts := range ps.Types {
			if ts.VersionRejected != "" || ts.Error != "" {
				t.Errorf("grpc-go NACKed %s version %s: %s", ts.Type, ts.VersionRejected, ts.Error)
			}
		}
	}
}
