package drillkit

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
	"google.golang.org/grpc"
	"google.golang.org/protobuf/proto"

	"github.com/weft-mesh/weft/certs/manifest"
	"github.com/weft-mesh/weft/pilot/xds/sign"
	"github.com/weft-mesh/weft/pilot/xds/snapshot"
	"github.com/weft-mesh/weft/sidecar/admin"
	dt "github.com/weft-mesh/weft/sidecar/dataplane/dataplanetest"
	"github.com/weft-mesh/weft/tools/testkit"
	"github.com/weft-mesh/weft/tools/testkit/proc"
)

// Workload is one workload's addresses: a loopback IP of its own.
type Workload struct {
	IP       string
	NodeID   string
	StateDir string
	KeyFile  string
}

func (w Workload) Outbound() string { return w.IP + ":15001" }

func (w Workload) Admin() string { return w.IP + ":15000" }

func (w Workload) ready() string { return w.IP + ":15021" }

// Sidecar is a running bin/sidecar, built as `make build` builds it, so memory
// measured here is the product's.
type Sidecar struct {
	T testing.TB
	*proc.Proc
	W Workload
}

func StartSidecar(t testing.TB, w Workload, pilot string, extra ...string) *Sidecar {
	t.Helper()
	args := []string{"--node-id", w.NodeID, "--namespace", "shop", "--service-account", "productpage", "--labels", "app=productpage",
		"--address", w.IP, "--pilot", pilot, "--publisher-key", w.KeyFile, "--state-dir", w.StateDir,
		"--admin-addr", w.Admin(), "--outbound-addr", w.Outbound(), "--xds-mode", "sotw"}
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
	return &Sidecar{T: t, Proc: proc.Start(t, "sidecar "+w.NodeID, proc.Build(t, proc.Sidecar), args...), W: w}
}

// stop sends SIGTERM and waits (SIGKILL after proc.StopGrace).
func (s *Sidecar) Terminate() { _ = s.Stop(s.Grace) }

var Client = &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{DisableKeepAlives: true}}

// Ready returns the readiness status and body.
func (s *Sidecar) Ready() (int, string) {
	resp, err := Client.Get("http://" + s.W.ready() + "/healthz/ready")
	if err != nil {
		return 0, err.Error()
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

func (s *Sidecar) ConfigDump() *admin.ConfigDump {
	s.T.Helper()
	cd, err := ConfigDumpAt("http://" + s.W.Admin())
	if err != nil {
		s.T.Fatal(err)
	}
	return cd
}

// ConfigDumpAt reads /config_dump of the sidecar whose admin API is at adminURL
// (http://host:port).
func ConfigDumpAt(adminURL string) (*admin.ConfigDump, error) {
	resp, err := Client.Get(adminURL + "/config_dump")
	if err != nil {
		return nil, fmt.Errorf("config_dump: %w", err)
	}
	defer resp.Body.Close()
	var cd admin.ConfigDump
	if err := json.NewDecoder(resp.Body).Decode(&cd); err != nil {
		return nil, fmt.Errorf("config_dump: %w", err)
	}
	return &cd, nil
}

// WaitReady waits for 200 from /healthz/ready and returns how long it took.
func (s *Sidecar) WaitReady(within time.Duration) time.Duration {
	s.T.Helper()
	start := time.Now()
	testkit.Wait(s.T, within, func() error {
		code, body := s.Ready()
		if code == http.StatusOK {
			return nil
		}
		select {
		case <-s.Exited():
			s.T.Fatalf("sidecar exited:\n%s", s.Logs.String())
		default:
		}
		return fmt.Errorf("sidecar not ready: %d %q", code, body)
	})
	return time.Since(start)
}

// Get sends one request through the sidecar's outbound listener.
func Get(client *http.Client, s Workload, host, path string) (int, string, http.Header, error) {
	req, err := http.NewRequest(http.MethodGet, "http://"+s.Outbound()+path, nil)
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

// StartApp is a small application server answering its name.
func StartApp(t testing.TB, addr, name string) {
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

// NewWorkload allocates a workload on loopback ip with its own state dir and the
// publisher key file.
func NewWorkload(t testing.TB, ip, nodeID string, pub ed25519.PublicKey) Workload {
	t.Helper()
	dir := t.TempDir()
	key := filepath.Join(dir, "publisher.pub")
	if err := manifest.WritePublicKey(key, pub); err != nil {
		t.Fatal(err)
	}
	return Workload{IP: ip, NodeID: nodeID, StateDir: filepath.Join(dir, "state"), KeyFile: key}
}

func NewKey(t testing.TB) ed25519.PrivateKey {
	t.Helper()
	_, priv, err := ed25519.GenerateKey(nil)
	if err != nil {
		t.Fatal(err)
	}
	return priv
}

// RefServer is go-control-plane's ADS server: a snapshot cache for the Envoy types
// and a linear cache for the signed manifest (go-control-plane's snapshot cache
// knows only Envoy's types), one node per server.
type RefServer struct {
	t      testing.TB
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

// Addr is the server's listening address.
func (r *RefServer) Addr() string { return r.addr }

// Quiet is a go-control-plane logger that logs nothing.
type Quiet struct{}

func (Quiet) Debugf(string, ...any) {}

func (Quiet) Infof(string, ...any) {}

func (Quiet) Warnf(string, ...any) {}

func (Quiet) Errorf(string, ...any) {}

func NewRefServer(t testing.TB, addr string, priv ed25519.PrivateKey, nodeID string) *RefServer {
	t.Helper()
	r := &RefServer{t: t, addr: addr, priv: priv, nodeID: nodeID,
		snaps: cachev3.NewSnapshotCache(true, cachev3.IDHash{}, Quiet{}),
		lin:   cachev3.NewLinearCache(manifest.TypeURL, cachev3.WithLogger(Quiet{}))}
	r.start()
	t.Cleanup(r.Stop)
	return r
}

func (r *RefServer) start() {
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
func (r *RefServer) Stop() {
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

// Push serves res at revision rev with a manifest signed for the node, valid for
// validity (0: 24h); validity < 0 serves no manifest (a plain xDS server).
func (r *RefServer) Push(res dt.Resources, rev int64, validity time.Duration) {
	r.t.Helper()
	msgs := map[string]map[string]proto.Message{}
	gcp := map[string][]types.Resource{}
	for typ, ms := range res {
		msgs[typ] = map[string]proto.Message{}
		for _, m := range ms {
			msgs[typ][NameOf(m)] = m
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

func NameOf(m proto.Message) string {
	if n, ok := m.(interface{ GetName() string }); ok && n.GetName() != "" {
		return n.GetName()
	}
	if n, ok := m.(interface{ GetClusterName() string }); ok {
		return n.GetClusterName()
	}
	return ""
}

// MeshTo is a config whose outbound listener (on w's address) routes every host to
// cluster "backend" at the given application addresses.
func MeshTo(w Workload, apps ...string) dt.Resources {
	return dt.Simple("outbound", dt.MustAddr(w.Outbound()), false, Addrs(apps...)...)
}

func Addrs(ss ...string) []netip.AddrPort {
	var out []netip.AddrPort
	for _, s := range ss {
		out = append(out, dt.MustAddr(s))
	}
	return out
}
