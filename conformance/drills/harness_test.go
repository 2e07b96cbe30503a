// Package drills runs the sidecar's failure drills (issue #4) against real
// processes: bin/sidecar and bin/pilot built as `make build` builds them, a small Go application server, and an
// xDS server (go-control-plane's, with manifests signed by pilot/xds/sign, or a
// hand-driven one for protocol faults).
package drills

import (
	"context"
	"crypto/ed25519"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/netip"
	"path/filepath"
	"sync"
	"testing"
	"time"

	discovery "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	"github.com/envoyproxy/go-control-plane/pkg/cache/types"
	cachev3 "github.com/envoyproxy/go-control-plane/pkg/cache/v3"
	serverv3 "github.com/envoyproxy/go-control-plane/pkg/server/v3"
	"go.uber.org/goleak"
	"google.golang.org/grpc"
	"google.golang.org/protobuf/proto"

	"github.com/weft-mesh/weft/certs/manifest"
	"github.com/weft-mesh/weft/pilot/xds/sign"
	"github.com/weft-mesh/weft/pilot/xds/snapshot"
	"github.com/weft-mesh/weft/sidecar/admin"
	dt "github.com/weft-mesh/weft/sidecar/dataplane/dataplanetest"
	"github.com/weft-mesh/weft/tools/testkit"
	"github.com/weft-mesh/weft/tools/testkit/etcdtest"
	"github.com/weft-mesh/weft/tools/testkit/proc"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m, goleak.Cleanup(func(code int) { proc.Cleanup(code); etcdtest.Cleanup(code) }))
}

// ws is one workload's addresses: a loopback IP of its own.
type ws struct {
	ip       string
	nodeID   string
	stateDir string
	keyFile  string
}

func (w ws) outbound() string { return w.ip + ":15001" }
func (w ws) admin() string    { return w.ip + ":15000" }
func (w ws) ready() string    { return w.ip + ":15021" }

// sidecar is a running bin/sidecar, built as `make build` builds it, so memory
// measured here is the product's.
type sidecar struct {
	t *testing.T
	*proc.Proc
	w ws
}

func startSidecar(t *testing.T, w ws, pilot string, extra ...string) *sidecar {
	t.Helper()
	args := []string{"--node-id", w.nodeID, "--namespace", "shop", "--service-account", "productpage", "--labels", "app=productpage",
		"--address", w.ip, "--pilot", pilot, "--publisher-key", w.keyFile, "--state-dir", w.stateDir,
		"--admin-addr", w.admin(), "--outbound-addr", w.outbound(), "--xds-mode", "sotw"}
	for _, e := range extra {
		if e == "--insecure-skip-manifest" { // no key at all, as with a plain xDS server
			for i := range args {
				if args[i] == "--publisher-key" {
					args = append(args[:i:i], args[i+2:]...)
					break
				}
			}
		}
	}
	args = append(args, extra...)
	return &sidecar{t: t, Proc: proc.Start(t, "sidecar "+w.nodeID, proc.Build(t, proc.Sidecar), args...), w: w}
}

// stop sends SIGTERM and waits (SIGKILL after proc.StopGrace).
func (s *sidecar) stop() { _ = s.Stop(s.Grace) }

var hc = &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{DisableKeepAlives: true}}

// ready returns the readiness status and body.
func (s *sidecar) ready() (int, string) {
	resp, err := hc.Get("http://" + s.w.ready() + "/healthz/ready")
	if err != nil {
		return 0, err.Error()
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

func (s *sidecar) configDump() *admin.ConfigDump {
	s.t.Helper()
	resp, err := hc.Get("http://" + s.w.admin() + "/config_dump")
	if err != nil {
		s.t.Fatalf("config_dump: %v", err)
	}
	defer resp.Body.Close()
	var cd admin.ConfigDump
	if err := json.NewDecoder(resp.Body).Decode(&cd); err != nil {
		s.t.Fatalf("config_dump: %v", err)
	}
	return &cd
}

// waitReady waits for 200 from /healthz/ready and returns how long it took.
func (s *sidecar) waitReady(within time.Duration) time.Duration {
	s.t.Helper()
	start := time.Now()
	testkit.Wait(s.t, within, func() error {
		code, body := s.ready()
		if code == http.StatusOK {
			return nil
		}
		select {
		case <-s.Exited():
			s.t.Fatalf("sidecar exited:\n%s", s.Logs.String())
		default:
		}
		return fmt.Errorf("sidecar not ready: %d %q", code, body)
	})
	return time.Since(start)
}

// get sends one request through the sidecar's outbound listener.
func get(client *http.Client, s ws, host, path string) (int, string, http.Header, error) {
	req, err := http.NewRequest(http.MethodGet, "http://"+s.outbound()+path, nil)
	if err != nil {
		return 0, "", nil, err
	}
	req.Host = host
	resp, err := client.Do(req)
	if err != nil {
		return 0, "", nil, err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b), resp.Header, err
}

// app is a small application server answering its name.
func startApp(t *testing.T, addr, name string) {
	t.Helper()
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.Copy(io.Discard, r.Body)
		fmt.Fprintf(w, "%s %s", name, r.URL.Path)
	}), ReadHeaderTimeout: 5 * time.Second}
	go srv.Serve(ln)
	t.Cleanup(func() { srv.Close() })
}

// newWorkload allocates a workload on loopback ip with its own state dir and the
// publisher key file.
func newWorkload(t *testing.T, ip, nodeID string, pub ed25519.PublicKey) ws {
	t.Helper()
	dir := t.TempDir()
	key := filepath.Join(dir, "publisher.pub")
	if err := manifest.WritePublicKey(key, pub); err != nil {
		t.Fatal(err)
	}
	return ws{ip: ip, nodeID: nodeID, stateDir: filepath.Join(dir, "state"), keyFile: key}
}

func newKey(t *testing.T) ed25519.PrivateKey {
	t.Helper()
	_, priv, err := ed25519.GenerateKey(nil)
	if err != nil {
		t.Fatal(err)
	}
	return priv
}

// refServer is go-control-plane's ADS server: a snapshot cache for the Envoy types
// and a linear cache for the signed manifest (go-control-plane's snapshot cache
// knows only Envoy's types), one node per server.
type refServer struct {
	t      *testing.T
	addr   string
	snaps  cachev3.SnapshotCache
	lin    *cachev3.LinearCache
	priv   ed25519.PrivateKey
	nodeID string
	mu     sync.Mutex
	gs     *grpc.Server
	cancel context.CancelFunc
	done   chan struct{}
}

type quiet struct{}

func (quiet) Debugf(string, ...any) {}
func (quiet) Infof(string, ...any)  {}
func (quiet) Warnf(string, ...any)  {}
func (quiet) Errorf(string, ...any) {}

func newRefServer(t *testing.T, addr string, priv ed25519.PrivateKey, nodeID string) *refServer {
	t.Helper()
	r := &refServer{t: t, addr: addr, priv: priv, nodeID: nodeID,
		snaps: cachev3.NewSnapshotCache(true, cachev3.IDHash{}, quiet{}),
		lin:   cachev3.NewLinearCache(manifest.TypeURL, cachev3.WithLogger(quiet{}))}
	r.start()
	t.Cleanup(r.stop)
	return r
}

func (r *refServer) start() {
	r.t.Helper()
	mux := &cachev3.MuxCache{
		Classify: func(req *cachev3.Request) string {
			if req.GetTypeUrl() == manifest.TypeURL {
				return "manifest"
			}
			return "envoy"
		},
		ClassifyDelta: func(req *cachev3.DeltaRequest) string {
			if req.GetTypeUrl() == manifest.TypeURL {
				return "manifest"
			}
			return "envoy"
		},
		Caches: map[string]cachev3.Cache{"envoy": r.snaps, "manifest": r.lin},
	}
	var ln net.Listener
	var err error
	// The port may still be in TIME_WAIT-free teardown after a stop: retry briefly.
	if err = testkit.Poll(time.Second, func() error {
		ln, err = net.Listen("tcp", r.addr)
		return err
	}); err != nil {
		r.t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	gs := grpc.NewServer()
	discovery.RegisterAggregatedDiscoveryServiceServer(gs, serverv3.NewServer(ctx, mux, nil))
	done := make(chan struct{})
	go func() { gs.Serve(ln); close(done) }()
	r.mu.Lock()
	r.gs, r.cancel, r.done = gs, cancel, done
	r.mu.Unlock()
}

// stop kills the server: every stream is cut, like a pilot process dying.
func (r *refServer) stop() {
	r.mu.Lock()
	gs, cancel, done := r.gs, r.cancel, r.done
	r.gs = nil
	r.mu.Unlock()
	if gs == nil {
		return
	}
	gs.Stop()
	cancel()
	<-done
}

// push serves res at revision rev with a manifest signed for the node, valid for
// validity (0: 24h); validity < 0 serves no manifest (a plain xDS server).
func (r *refServer) push(res dt.Resources, rev int64, validity time.Duration) {
	r.t.Helper()
	msgs := map[string]map[string]proto.Message{}
	gcp := map[string][]types.Resource{}
	for typ, ms := range res {
		msgs[typ] = map[string]proto.Message{}
		for _, m := range ms {
			msgs[typ][nameOf(m)] = m
			gcp[typ] = append(gcp[typ], m)
		}
	}
	s, err := cachev3.NewSnapshot(fmt.Sprint(rev), gcp)
	if err != nil {
		r.t.Fatal(err)
	}
	if err := r.snaps.SetSnapshot(context.Background(), r.nodeID, s); err != nil {
		r.t.Fatal(err)
	}
	if validity < 0 {
		return
	}
	snap, err := snapshot.New(rev, msgs)
	if err != nil {
		r.t.Fatal(err)
	}
	mres, err := sign.Manifest(r.priv, r.nodeID, snap, time.Now(), validity)
	if err != nil {
		r.t.Fatal(err)
	}
	sm, err := mres.Any.UnmarshalNew()
	if err != nil {
		r.t.Fatal(err)
	}
	// The manifest goes last, as pilot sends it.
	if err := r.lin.UpdateResource(manifest.Name, sm); err != nil {
		r.t.Fatal(err)
	}
}

func nameOf(m proto.Message) string {
	if n, ok := m.(interface{ GetName() string }); ok && n.GetName() != "" {
		return n.GetName()
	}
	if n, ok := m.(interface{ GetClusterName() string }); ok {
		return n.GetClusterName()
	}
	return ""
}

// meshTo is a config whose outbound listener (on w's address) routes every host to
// cluster "backend" at the given application addresses.
func meshTo(w ws, apps ...string) dt.Resources {
	return dt.Simple("outbound", dt.MustAddr(w.outbound()), false, addrs(apps...)...)
}

func addrs(ss ...string) []netip.AddrPort {
	var out []netip.AddrPort
	for _, s := range ss {
		out = append(out, dt.MustAddr(s))
	}
	return out
}
