package httpproxy_test

import (
	"flag"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"
	"go.uber.org/goleak"

	"github.com/weft-mesh/weft/sidecar/cluster"
	"github.com/weft-mesh/weft/sidecar/dataplane"
	dt "github.com/weft-mesh/weft/sidecar/dataplane/dataplanetest"
	"github.com/weft-mesh/weft/sidecar/httpproxy"
	"github.com/weft-mesh/weft/sidecar/listener"
	"github.com/weft-mesh/weft/sidecar/overload"
	"github.com/weft-mesh/weft/sidecar/tcpproxy"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// sidecar is one running data plane: a listener, both proxies and an upstream pool.
type sidecar struct {
	Addr netip.AddrPort
	snap atomic.Pointer[dataplane.Config]
	hp   *httpproxy.Proxy
	// shutdown ends the listener's Serve (drain, close) and waits for it; the
	// test's cleanup calls it too.
	shutdown func()
}

type sidecarOpts struct {
	name     string // listener name, default "outbound"
	degraded httpproxy.DegradedFunc
	observer httpproxy.Observer
	tcpObs   tcpproxy.Observer
	// Overload bounds (zero: the packages' defaults).
	maxRequests    int
	memory         *overload.Memory
	defaultTimeout time.Duration           // dataplane.Options.DefaultRouteTimeout
	queueTimeout   time.Duration           // dataplane.Options.QueueTimeout
	registry       *cluster.Registry       // dataplane.Options.Registry (the config is activated)
	expectTimeout  time.Duration           // httpproxy.Config.ExpectContinueTimeout
	upgradeIdle    time.Duration           // httpproxy.Config.UpgradeIdleTimeout
	proxy          func(*httpproxy.Config) // edits the proxy's config last
	drain          time.Duration           // listener.Config.DrainTimeout
}

// validationPool is an upstream pool for tests of httpproxy.New's checks.
func validationPool(t *testing.T) *cluster.Pool {
	t.Helper()
	pool, err := cluster.NewPool(cluster.PoolConfig{MaxIdlePerHost: 1, IdleTimeout: time.Minute, BufferSize: 8192})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	return pool
}

// h2serverFlag picks the HTTP/2 server of every sidecar the tests start
// (Config.H2Server; "" the default), so the package's HTTP/2 and gRPC tests
// run against either: go test ./sidecar/httpproxy -args -h2server=std.
var h2serverFlag = flag.String("h2server", "", "HTTP/2 server of the tests' sidecars: std or weft (default: httpproxy.DefaultH2Server)")

// h2clientFlag picks their HTTP/2 client likewise (Config.H2Client):
// go test ./sidecar/httpproxy -args -h2client=std.
var h2clientFlag = flag.String("h2client", "", "HTTP/2 client of the tests' sidecars: std or weft (default: cluster.DefaultH2Client)")

// listen reserves a loopback port so configs can name it before the sidecar starts.
func listen(t testing.TB) net.Listener {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	return ln
}

func addrOf(ln net.Listener) netip.AddrPort { return netip.MustParseAddrPort(ln.Addr().String()) }

// startSidecar serves res on ln until the test ends.
func startSidecar(t *testing.T, ln net.Listener, res dt.Resources, o sidecarOpts) *sidecar {
	t.Helper()
	return startSidecarTB(t, ln, res, o)
}

func startSidecarB(b *testing.B, ln net.Listener, res dt.Resources, o sidecarOpts) *sidecar {
	return startSidecarTB(b, ln, res, o)
}

func startSidecarTB(t testing.TB, ln net.Listener, res dt.Resources, o sidecarOpts) *sidecar {
	t.Helper()
	if o.name == "" {
		o.name = "outbound"
	}
	cfg, err := res.Compile(dataplane.Options{DefaultRouteTimeout: o.defaultTimeout, QueueTimeout: o.queueTimeout, Registry: o.registry})
	if err != nil {
		t.Fatal(err)
	}
	s := &sidecar{Addr: addrOf(ln)}
	s.snap.Store(cfg)
	if o.registry != nil {
		cfg.Activate()
	}
	log := hclog.New(&hclog.LoggerOptions{Name: t.Name(), Level: hclog.Warn, Output: testWriter{t}})
	pool, err := cluster.NewPool(cluster.PoolConfig{MaxIdlePerHost: 16, IdleTimeout: time.Minute, BufferSize: 8192})
	if err != nil {
		t.Fatal(err)
	}
	pcfg := httpproxy.Config{Logger: log, Pool: pool, Degraded: o.degraded, Observer: o.observer, Memory: o.memory,
		ExpectContinueTimeout: o.expectTimeout, UpgradeIdleTimeout: o.upgradeIdle, H2Server: *h2serverFlag,
		H2Client: *h2clientFlag}
	if o.proxy != nil {
		o.proxy(&pcfg)
	}
	hp, err := httpproxy.New(pcfg)
	if err != nil {
		t.Fatal(err)
	}
	s.hp = hp
	tp, err := tcpproxy.New(tcpproxy.Config{Logger: log, Observer: o.tcpObs})
	if err != nil {
		t.Fatal(err)
	}
	srv, err := listener.New(listener.Config{Name: o.name, Logger: log, Snapshot: &s.snap, HTTP: hp, TCP: tp, MaxRequests: o.maxRequests,
		DrainTimeout: o.drain})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		hp.Close()
		pool.Close()
	})
	_, s.shutdown = dt.Serve(t, srv, ln) // its cleanup, first, stops Serve
	return s
}

type testWriter struct{ t testing.TB }

func (w testWriter) Write(b []byte) (int, error) { w.t.Log(string(b)); return len(b), nil }

// app is an HTTP/1.1 test application counting connections and requests.
type app struct {
	*httptest.Server
	conns atomic.Int64
	reqs  atomic.Int64
}

func startApp(t *testing.T, h http.HandlerFunc) *app {
	t.Helper()
	a := &app{}
	a.Server = httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		a.reqs.Add(1)
		h(w, r)
	}))
	a.Config.ConnState = func(_ net.Conn, s http.ConnState) {
		if s == http.StateNew {
			a.conns.Add(1)
		}
	}
	a.Start()
	t.Cleanup(a.Close)
	return a
}

func (a *app) ap() netip.AddrPort { return netip.MustParseAddrPort(a.Listener.Addr().String()) }

// client is an HTTP/1.1 client that closes its idle connections at test end.
func client(t *testing.T) *http.Client {
	tr := &http.Transport{MaxIdleConnsPerHost: 8, DisableCompression: true}
	t.Cleanup(tr.CloseIdleConnections)
	return &http.Client{Transport: tr, Timeout: 10 * time.Second}
}

// h2cClient speaks prior-knowledge HTTP/2 over plaintext.
func h2cClient(t *testing.T) *http.Client {
	var p http.Protocols
	p.SetUnencryptedHTTP2(true)
	tr := &http.Transport{Protocols: &p}
	t.Cleanup(tr.CloseIdleConnections)
	return &http.Client{Transport: tr, Timeout: 10 * time.Second}
}
