package httpproxy_test

import (
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"net/netip"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	dt "github.com/weft-mesh/weft/sidecar/dataplane/dataplanetest"
	"github.com/weft-mesh/weft/sidecar/xdsresource"
)

// healthApp is a real gRPC server: Check answers (or waits for its deadline when asked
// for service "slow"); Watch streams three messages then ends with a status and trailer.
type healthApp struct {
	healthpb.UnimplementedHealthServer
	mu          sync.Mutex
	sawDeadline bool
}

func (h *healthApp) Check(ctx context.Context, r *healthpb.HealthCheckRequest) (*healthpb.HealthCheckResponse, error) {
	if _, ok := ctx.Deadline(); ok {
		h.mu.Lock()
		h.sawDeadline = true
		h.mu.Unlock()
	}
	if r.GetService() == "slow" {
		<-ctx.Done()
		return nil, status.FromContextError(ctx.Err()).Err()
	}
	_ = grpc.SetHeader(ctx, metadata.Pairs("x-app", "health"))
	return &healthpb.HealthCheckResponse{Status: healthpb.HealthCheckResponse_SERVING}, nil
}

func (h *healthApp) Watch(r *healthpb.HealthCheckRequest, s grpc.ServerStreamingServer[healthpb.HealthCheckResponse]) error {
	for range 3 {
		if err := s.Send(&healthpb.HealthCheckResponse{Status: healthpb.HealthCheckResponse_SERVING}); err != nil {
			return err
		}
	}
	s.SetTrailer(metadata.Pairs("x-trailer", "yes"))
	return status.Error(codes.Aborted, "done streaming")
}

func startGRPC(t *testing.T) (netip.AddrPort, *healthApp) {
	t.Helper()
	ln := listen(t)
	srv := grpc.NewServer()
	h := &healthApp{}
	healthpb.RegisterHealthServer(srv, h)
	done := make(chan struct{})
	go func() { defer close(done); _ = srv.Serve(ln) }()
	t.Cleanup(func() { srv.Stop(); <-done })
	return addrOf(ln), h
}

// mesh starts an inbound sidecar in front of app and an outbound sidecar that sends
// host "svc" to the inbound one over h2c, like two workloads' sidecars.
func mesh(t *testing.T, app netip.AddrPort, appH2 bool) *sidecar {
	t.Helper()
	inLn := listen(t)
	in := dt.Resources{}
	in.Add(xdsresource.ListenerType, dt.Listener("inbound", addrOf(inLn), dt.HTTPChain(0, "inbound")))
	in.Add(xdsresource.RouteType, dt.RouteConfig("inbound", dt.VirtualHost("in", []string{"*"}, dt.PrefixRoute("/", "inbound|80||", 0))))
	in.Add(xdsresource.ClusterType, dt.EDSCluster("inbound|80||", dt.ClusterOpts{HTTP2: appH2}))
	in.Add(xdsresource.EndpointType, dt.Endpoints("inbound|80||", app))
	startSidecar(t, inLn, in, sidecarOpts{name: "inbound"})

	outLn := listen(t)
	out := dt.Resources{}
	peer := "outbound|80||svc.default.svc.cluster.local"
	out.Add(xdsresource.ListenerType, dt.HTTPListener("outbound", addrOf(outLn), "80"))
	out.Add(xdsresource.RouteType, dt.RouteConfig("80", dt.VirtualHost("svc", []string{"svc", "svc:80"}, dt.PrefixRoute("/", peer, 0))))
	out.Add(xdsresource.ClusterType, dt.EDSCluster(peer, dt.ClusterOpts{HTTP2: true}))
	out.Add(xdsresource.EndpointType, dt.MarkPeer(dt.Endpoints(peer, addrOf(inLn)), addrOf(inLn)))
	return startSidecar(t, outLn, out, sidecarOpts{})
}

func TestGRPCThroughTwoSidecars(t *testing.T) {
	app, h := startGRPC(t)
	out := mesh(t, app, true)
	cc, err := grpc.NewClient("passthrough:///"+out.Addr.String(), grpc.WithTransportCredentials(insecure.NewCredentials()), grpc.WithAuthority("svc"))
	if err != nil {
		t.Fatal(err)
	}
	defer cc.Close()
	hc := healthpb.NewHealthClient(cc)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()

	var hdr metadata.MD
	resp, err := hc.Check(ctx, &healthpb.HealthCheckRequest{}, grpc.Header(&hdr))
	if err != nil || resp.GetStatus() != healthpb.HealthCheckResponse_SERVING {
		t.Fatalf("Check: %v %v", resp, err)
	}
	if got := hdr.Get("x-app"); len(got) != 1 || got[0] != "health" {
		t.Errorf("response header x-app = %v", got)
	}
	h.mu.Lock()
	saw := h.sawDeadline
	h.mu.Unlock()
	if !saw {
		t.Error("app did not see the caller's deadline (grpc-timeout not forwarded)")
	}

	// Server streaming: all messages, then the status and trailer set by the app.
	st, err := hc.Watch(ctx, &healthpb.HealthCheckRequest{})
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for {
		_, err = st.Recv()
		if err != nil {
			break
		}
		n++
	}
	if n != 3 || status.Code(err) != codes.Aborted || status.Convert(err).Message() != "done streaming" {
		t.Errorf("Watch: %d messages, end %v; want 3 and Aborted/done streaming", n, err)
	}
	if got := st.Trailer().Get("x-trailer"); len(got) != 1 || got[0] != "yes" {
		t.Errorf("trailer x-trailer = %v", got)
	}

	// Deadline: the slow call ends with DeadlineExceeded near its deadline.
	sctx, scancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
	defer scancel()
	start := time.Now()
	_, err = hc.Check(sctx, &healthpb.HealthCheckRequest{Service: "slow"})
	if status.Code(err) != codes.DeadlineExceeded {
		t.Errorf("slow Check: %v, want DeadlineExceeded", err)
	}
	if d := time.Since(start); d > 2*time.Second {
		t.Errorf("slow Check took %v", d)
	}
}

// TestHTTPThroughTwoSidecars: HTTP/1.1 and h2c clients reach an HTTP/1.1 app through
// outbound → (h2c between sidecars) → inbound.
func TestHTTPThroughTwoSidecars(t *testing.T) {
	a := startApp(t, echo)
	out := mesh(t, a.ap(), false)
	for _, c := range []*http.Client{client(t), h2cClient(t)} {
		for _, body := range []string{"", "payload"} {
			method := "GET"
			if body != "" {
				method = "POST"
			}
			resp, got := do(t, c, method, "http://"+out.Addr.String()+"/p?q=1", "svc", body)
			if resp.StatusCode != 200 || got != method+" /p body="+body || resp.Header.Get("X-Host") != "svc" || resp.Header.Get("X-Path") != "/p?q=1" {
				t.Errorf("%s %s: %d %q host=%q path=%q", resp.Proto, method, resp.StatusCode, got, resp.Header.Get("X-Host"), resp.Header.Get("X-Path"))
			}
		}
	}
}

func TestTCPProxy(t *testing.T) {
	echoAddr := dt.ServeTCP(t, dt.Echo)
	ln := listen(t)
	res := dt.Resources{}
	res.Add(xdsresource.ListenerType, dt.Listener("tcp", addrOf(ln), dt.TCPChain(0, "db")))
	res.Add(xdsresource.ClusterType, dt.EDSCluster("db", dt.ClusterOpts{}))
	res.Add(xdsresource.EndpointType, dt.Endpoints("db", echoAddr))
	s := startSidecar(t, ln, res, sidecarOpts{name: "tcp"})
	c, err := net.Dial("tcp", s.Addr.String())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	msg := make([]byte, 1<<20)
	for i := range msg {
		msg[i] = byte(i)
	}
	go func() {
		_, _ = c.Write(msg)
		_ = c.(*net.TCPConn).CloseWrite() // half-close: the echo still flows back
	}()
	_ = c.SetReadDeadline(time.Now().Add(10 * time.Second))
	got, err := io.ReadAll(c)
	if err != nil && !errors.Is(err, io.EOF) {
		t.Fatal(err)
	}
	if len(got) != len(msg) || string(got) != string(msg) {
		t.Errorf("echo: got %d bytes, want %d identical", len(got), len(msg))
	}
}
