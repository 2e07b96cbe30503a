// Package grpcxds checks pilot against a real, independent xDS client: grpc-go's
// proxyless xDS resolver and balancers (google.golang.org/grpc/xds). grpc-go
// speaks state of the world only; delta is covered by pilot/xds/ads's protocol
// tests and conformance/nack.
package grpcxds

import (
	"context"
	"fmt"
	"net"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"go.uber.org/goleak"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	testgrpc "google.golang.org/grpc/interop/grpc_testing"
	grpcstatus "google.golang.org/grpc/status"
	"google.golang.org/grpc/xds"

	"github.com/weft-mesh/weft/pilot/server/servertest"
	"github.com/weft-mesh/weft/pilot/status"
	"github.com/weft-mesh/weft/tools/testkit"
)

// grpc-go's bootstrap "tls" channel credentials (identity_test.go: proxyless
// clients and servers that talk mTLS to pilot) leave one pemfile watcher
// goroutine per bootstrap running after the client and server are closed
// (grpc-go 1.85, with its *ForTesting bootstrap options; the data-plane
// certificate_providers are released, as pilot/xds/gen's referee shows), so
// that goroutine alone is ignored.
func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m, goleak.IgnoreTopFunction("google.golang.org/grpc/credentials/tls/certprovider/pemfile.(*watcher).run"))
}

const (
	ns      = "rpc"
	svc     = "greeter"
	svcPort = 50051
	target  = "xds:///greeter.rpc.svc.cluster.local:50051"
	nodeID  = "grpc-client-1"
)

// backend is a real gRPC server that answers UnaryCall with its own id.
type backend struct {
	testgrpc.UnimplementedTestServiceServer
	id   string
	port int
	gs   *grpc.Server
	done chan struct{}
	// fail makes every call answer UNAVAILABLE; calls counts them all.
	fail  atomic.Bool
	calls atomic.Int64
	// A call whose payload is holdPayload reports on held, then waits for
	// release (or its context).
	held    chan struct{}
	release chan struct{}
}

const holdPayload = "hold"

func (b *backend) UnaryCall(ctx context.Context, r *testgrpc.SimpleRequest) (*testgrpc.SimpleResponse, error) {
	b.calls.Add(1)
	if b.fail.Load() {
		return nil, grpcstatus.Error(codes.Unavailable, b.id+" is failing")
	}
	if string(r.GetPayload().GetBody()) == holdPayload {
		b.held <- struct{}{}
		select {
		case <-b.release:
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
	return &testgrpc.SimpleResponse{ServerId: b.id}, nil
}

func startBackend(t *testing.T, id string) *backend {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	b := &backend{id: id, port: lis.Addr().(*net.TCPAddr).Port, gs: grpc.NewServer(), done: make(chan struct{}),
		held: make(chan struct{}, 16), release: make(chan struct{})}
	testgrpc.RegisterTestServiceServer(b.gs, b)
	go func() {
		defer close(b.done)
		_ = b.gs.Serve(lis)
	}()
	t.Cleanup(func() {
		b.gs.Stop()
		<-b.done
	})
	return b
}

func meshYAML(backends ...*backend) string {
	y := fmt.Sprintf(`apiVersion: mesh.weft.dev/v1alpha1
kind: Service
metadata: {name: %s, namespace: %s}
spec:
  selector: {app: greeter}
  ports:
  - {name: grpc, port: %d, protocol: GRPC}
`, svc, ns, svcPort)
	for _, b := range backends {
		y += fmt.Sprintf(`---
apiVersion: mesh.weft.dev/v1alpha1
kind: Workload
metadata: {name: %s, namespace: %s, labels: {app: greeter}}
spec: {address: 127.0.0.1, serviceAccount: greeter, locality: local/a, ports: {grpc: %d}}
`, b.id, ns, b.port)
	}
	return y
}

func bootstrap(xdsAddr string) []byte {
	return []byte(`{
  "xds_servers": [{"server_uri": "` + xdsAddr + `", "channel_creds": [{"type": "insecure"}], "server_features": ["xds_v3"]}],
  "node": {"id": "` + nodeID + `", "cluster": "conformance", "locality": {"zone": "a"}}
}`)
}

// TestGRPCClient: calls through pilot's xDS reach both backends; deleting one
// Workload moves every later call to the other within a second; grpc-go ACKs
// every version, so pilot's status says SYNCED for CDS, EDS, LDS and RDS.
func TestGRPCClient(t *testing.T) {
	p := servertest.Start(t, servertest.Options{})
	b1, b2 := startBackend(t, "backend-1"), startBackend(t, "backend-2")
	p.Apply(t, meshYAML(b1, b2))

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
	call := func() (string, error) {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		r, err := client.UnaryCall(ctx, &testgrpc.SimpleRequest{})
		if err != nil {
			return "", err
		}
		return r.GetServerId(), nil
	}

	// Both backends answer (round robin; allow a few calls while EDS settles).
	seen := map[string]int{}
	var lastErr error
	testkit.Wait(t, 20*time.Second, func() error {
		if id, err := call(); err != nil {
			lastErr = err
		} else {
			seen[id]++
		}
		if len(seen) < 2 {
			return fmt.Errorf("calls did not reach both backends: %v (last error: %v)", seen, lastErr)
		}
		return nil
	})
	t.Logf("reached both backends: %v", seen)

	rev := p.Apply(t, meshYAML(b1, b2)) // unchanged: same revision
	waitSynced(t, p, rev)

	// Delete backend-1: every call from one second after the delete on reaches backend-2.
	start := time.Now()
	rev = p.Delete(t, "workloads", ns, b1.id)
	var lastB1 time.Time
	for time.Since(start) < 3*time.Second { // a window of back-to-back calls, not a wait
		id, err := call()
		if err != nil {
			t.Fatalf("call after delete: %v", err)
		}
		if id == b1.id {
			lastB1 = time.Now()
		}
	}
	moved := time.Duration(0)
	if !lastB1.IsZero() {
		moved = lastB1.Sub(start)
	}
	t.Logf("last call to the deleted backend %v after the delete", moved)
	if moved > time.Second {
		t.Errorf("a call reached the deleted backend %v after the delete, want <= 1s", moved)
	}
	waitSynced(t, p, rev)
	// grpc-go accepted every version pilot sent: not one NACK.
	if page := p.Metrics(t); strings.Contains(page, "weft_pilot_xds_nacks_total{") {
		t.Errorf("grpc-go NACKed a response:\n%s", page)
	}
}

// waitSynced waits until grpc-go has ACKed rev for all four types.
func waitSynced(t *testing.T, p *servertest.Pilot, rev int64) {
	t.Helper()
	p.WaitProxy(t, 10*time.Second, nodeID, fmt.Sprintf("SYNCED at revision %d for CDS, EDS, LDS, RDS", rev),
		func(ps status.ProxyStatus) bool { return synced(ps, rev) })
}

func synced(ps status.ProxyStatus, rev int64) bool {
	want := map[string]bool{"CDS": false, "EDS": false, "LDS": false, "RDS": false}
	for _, ts := range ps.Types {
		if _, ok := want[ts.Type]; ok && ts.Status == status.Synced {
			want[ts.Type] = true
		}
	}
	for _, ok := range want {
		if !ok {
			return false
		}
	}
	return ps.Status == status.Synced && ps.EffectiveRevision >= rev
}
