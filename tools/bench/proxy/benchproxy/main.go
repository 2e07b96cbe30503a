// Command benchproxy serves the sidecar data plane from a static config built in Go
// (until xDS wiring exists): one listener routing every request to one cluster.
package main

import (
	"context"
	"flag"
	"fmt"
	"net"
	"net/http"
	_ "net/http/pprof" // served only when -pprof is set
	"net/netip"
	"os"
	"os/signal"
	"strings"
	"sync/atomic"
	"syscall"
	"time"

	clusterv3 "github.com/envoyproxy/go-control-plane/envoy/config/cluster/v3"
	endpointv3 "github.com/envoyproxy/go-control-plane/envoy/config/endpoint/v3"
	listenerv3 "github.com/envoyproxy/go-control-plane/envoy/config/listener/v3"
	"github.com/hashicorp/go-hclog"

	"github.com/weft-mesh/weft/sidecar/cluster"
	"github.com/weft-mesh/weft/sidecar/dataplane"
	"github.com/weft-mesh/weft/sidecar/dataplane/dataplanetest"
	"github.com/weft-mesh/weft/sidecar/httpproxy"
	"github.com/weft-mesh/weft/sidecar/listener"
	"github.com/weft-mesh/weft/sidecar/mtls"
	"github.com/weft-mesh/weft/sidecar/tcpproxy"
	"github.com/weft-mesh/weft/sidecar/xdsresource"
)

func main() {
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, "benchproxy:", err)
		os.Exit(1)
	}
}

func run() error {
	listen := flag.String("listen", "127.0.0.1:15001", "listen address")
	upstreams := flag.String("upstream", "127.0.0.1:9000", "comma-separated upstream endpoints")
	h2 := flag.Bool("h2", false, "upstream speaks h2c")
	peer := flag.Bool("peer", false, "upstreams are peer sidecars (weft.peer=sidecar, as pilot marks them): HTTP goes to them over h2c")
	pprofAddr := flag.String("pprof", "", "serve net/http/pprof on this address")
	mtlsGen := flag.String("mtls-gen", "", "write a mesh CA, client and server SVIDs and a CRL into this directory, then exit")
	mtlsDir := flag.String("mtls", "", "mTLS with the identities -mtls-gen wrote here (needs -mtls-as)")
	mtlsAs := flag.String("mtls-as", "", "server: the listener takes mTLS only (STRICT); client: upstreams are mTLS peer sidecars expecting the server's SPIFFE ID")
	flag.Parse()
	log := hclog.New(&hclog.LoggerOptions{Name: "benchproxy", Level: hclog.Warn})
	if *mtlsGen != "" {
		return genMTLS(*mtlsGen)
	}
	la, err := netip.ParseAddrPort(*listen)
	if err != nil {
		return err
	}
	var ups []netip.AddrPort
	for _, u := range strings.Split(*upstreams, ",") {
		a, err := netip.ParseAddrPort(u)
		if err != nil {
			return err
		}
		ups = append(ups, a)
	}
	res := dataplanetest.Simple("bench", la, *h2, ups...)
	if *peer {
		for _, m := range res[xdsresource.EndpointType] {
			dataplanetest.MarkPeer(m.(*endpointv3.ClusterLoadAssignment), ups...)
		}
	}
	var mt *mtls.Manager
	if *mtlsDir != "" {
		var rootPEM, crlPEM []byte
		if mt, rootPEM, crlPEM, err = loadMTLS(*mtlsDir, *mtlsAs, log); err != nil {
			return err
		}
		res.Add(xdsresource.SecretType, dataplanetest.RootCA(rootPEM, crlPEM))
		switch *mtlsAs {
		case "server":
			l := res[xdsresource.ListenerType][0].(*listenerv3.Listener)
			dataplanetest.WithTransport(l.FilterChains[0], xdsresource.TransportTLS)
		case "client":
			c := res[xdsresource.ClusterType][0].(*clusterv3.Cluster)
			c.TransportSocket = dataplanetest.UpstreamTLS("bench", []string{mtls.ALPNH2}, "spiffe://"+benchTD+"/ns/bench/sa/"+benchSAs["server"])
			for _, m := range res[xdsresource.EndpointType] {
				dataplanetest.MarkMTLS(dataplanetest.MarkPeer(m.(*endpointv3.ClusterLoadAssignment), ups...), ups...)
			}
		default:
			return fmt.Errorf("-mtls-as %q: want server or client", *mtlsAs)
		}
	}
	cfg, err := res.Compile(dataplane.Options{MTLS: mt})
	if err != nil {
		return err
	}
	var snap atomic.Pointer[dataplane.Config]
	snap.Store(cfg)
	pool, err := cluster.NewPool(cluster.PoolConfig{MaxIdlePerHost: 1024, IdleTimeout: 90 * time.Second, BufferSize: 16 << 10, MTLS: mt})
	if err != nil {
		return err
	}
	defer pool.Close()
	hp, err := httpproxy.New(httpproxy.Config{Logger: log, Pool: pool, MTLS: mt})
	if err != nil {
		return err
	}
	defer hp.Close()
	tp, err := tcpproxy.New(tcpproxy.Config{Logger: log, MTLS: mt})
	if err != nil {
		return err
	}
	srv, err := listener.New(listener.Config{Name: "bench", Logger: log, Snapshot: &snap, HTTP: hp, TCP: tp, MTLS: mt})
	if err != nil {
		return err
	}
	if *pprofAddr != "" {
		go func() { _ = http.ListenAndServe(*pprofAddr, nil) }()
	}
	ln, err := net.Listen("tcp", *listen)
	if err != nil {
		return err
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	return srv.Serve(ctx, ln)
}
