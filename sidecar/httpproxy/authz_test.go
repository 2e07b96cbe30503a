package httpproxy_test

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"io"
	"net"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	listenerv3 "github.com/envoyproxy/go-control-plane/envoy/config/listener/v3"
	rbacv3 "github.com/envoyproxy/go-control-plane/envoy/config/rbac/v3"
	"github.com/hashicorp/go-hclog"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/status"

	"github.com/weft-mesh/weft/sidecar/authz"
	"github.com/weft-mesh/weft/sidecar/cluster"
	"github.com/weft-mesh/weft/sidecar/dataplane"
	dt "github.com/weft-mesh/weft/sidecar/dataplane/dataplanetest"
	"github.com/weft-mesh/weft/sidecar/httpproxy"
	"github.com/weft-mesh/weft/sidecar/mtls"
	"github.com/weft-mesh/weft/sidecar/mtls/mtlstest"
	"github.com/weft-mesh/weft/sidecar/svid"
	"github.com/weft-mesh/weft/sidecar/xdsresource"
)

type rbacPolicies = map[string]*rbacv3.Policy

// inboundAuthz is an inbound listener at ln routing everything to app, with an
// Override blocking t42/bot, a DENY of /admin for anyone, an ALLOW for
// namespace shop or path /public/ (plaintext included), and an AUDIT.
func inboundAuthz(ln net.Listener, app *app) dt.Resources {
	any1 := []*rbacv3.Principal{dt.AnyPrincipal()}
	l := dt.HTTPListener("inbound", addrOf(ln), "routes")
	dt.WithHTTPFilters(l,
		dt.HTTPRBAC("weft.override", dt.Rules(rbacv3.RBAC_DENY, rbacPolicies{"shop/block-bot": dt.Policy([]*rbacv3.Permission{dt.AnyPermission()},
			[]*rbacv3.Principal{dt.Principal("spiffe://cluster.local/ns/t42/sa/bot")})}), nil),
		dt.HTTPRBAC("envoy.filters.http.rbac", dt.Rules(rbacv3.RBAC_DENY, rbacPolicies{"shop/no-admin": dt.Policy([]*rbacv3.Permission{dt.PathPrefix("/admin")}, any1)}), nil),
		dt.HTTPRBAC("envoy.filters.http.rbac", dt.Rules(rbacv3.RBAC_ALLOW, rbacPolicies{
			"shop/shop":   dt.Policy([]*rbacv3.Permission{dt.AnyPermission()}, []*rbacv3.Principal{dt.Namespace("cluster.local", "shop"), dt.Namespace("cluster.local", "t42")}),
			"shop/public": dt.Policy([]*rbacv3.Permission{dt.AndRules(dt.Method("GET"), dt.PathPrefix("/public/"))}, any1),
		}), nil),
		dt.HTTPRBAC("envoy.filters.http.rbac", dt.Rules(rbacv3.RBAC_LOG, rbacPolicies{"shop/audit": dt.Policy([]*rbacv3.Permission{dt.AnyPermission()}, any1)}), nil),
	)
	dt.WithOverrides(l, dt.OverrideTTL{Name: "shop/block-bot", TTL: time.Hour, Revision: 1})
	r := dt.Resources{}
	r.Add(xdsresource.ListenerType, l)
	r.Add(xdsresource.RouteType, dt.RouteConfig("routes", dt.VirtualHost("all", []string{"*"}, dt.PrefixRoute("/", "backend", 0))))
	r.Add(xdsresource.ClusterType, dt.EDSCluster("backend", dt.ClusterOpts{}))
	r.Add(xdsresource.EndpointType, dt.Endpoints("backend", app.ap()))
	return r
}

// mtlsInbound serves cfg's "inbound" listener on ln the way the sidecar's
// listener does after TLS termination: every accepted connection through the
// server's mtls.Manager (real TLS 1.3, client certificate verified against the
// CA's bundle), then httpproxy.ServeConn. plain serves a second listener without
// TLS (PERMISSIVE plaintext).
type authzServer struct {
	snap  atomic.Pointer[dataplane.Config]
	hp    *httpproxy.Proxy
	state *authz.State
}

func startAuthzServer(t *testing.T, ca *mtlstest.CA, res func(ln net.Listener) dt.Resources, expired *atomic.Pointer[string]) (s *authzServer, tlsAddr, plainAddr string) {
	t.Helper()
	tlsLn, plainLn := listen(t), listen(t)
	s = &authzServer{state: authz.NewState()}
	cfg, err := res(tlsLn).Compile(dataplane.Options{Authz: s.state})
	if err != nil {
		t.Fatal(err)
	}
	s.snap.Store(cfg)
	log := hclog.New(&hclog.LoggerOptions{Name: t.Name(), Level: hclog.Warn, Output: testWriter{t}})
	pool, err := cluster.NewPool(cluster.PoolConfig{MaxIdlePerHost: 4, IdleTimeout: time.Minute, BufferSize: 8192})
	if err != nil {
		t.Fatal(err)
	}
	hp, err := httpproxy.New(httpproxy.Config{Logger: log, Pool: pool, AuthzExpired: func() (string, bool) {
		if p := expired.Load(); p != nil {
			return *p, true
		}
		return "", false
	}})
	if err != nil {
		t.Fatal(err)
	}
	s.hp = hp
	h := &svid.Holder{}
	h.Store(ca.Workload(t, "cluster.local", "shop", "reviews"))
	m, err := mtls.New(mtls.Config{SVID: h, Logger: log})
	if err != nil {
		t.Fatal(err)
	}
	trust, err := mtls.NewTrust(ca.Bundle(t), ca.CRL(t, 1, time.Now().Add(-time.Minute), time.Hour))
	if err != nil {
		t.Fatal(err)
	}
	m.SetTrust(trust, true)
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	serve := func(ln net.Listener, useTLS bool) {
		defer wg.Done()
		for {
			raw, err := ln.Accept()
			if err != nil {
				return
			}
			wg.Add(1)
			go func() {
				defer wg.Done()
				c := raw
				if useTLS {
					mc, err := m.Server(ctx, raw)
					if err != nil {
						return
					}
					c = mc
				}
				hp.ServeConn(ctx, c, httpproxy.Target{Snapshot: &s.snap, Listener: "inbound", Dest: addrOf(tlsLn)})
			}()
		}
	}
	wg.Add(2)
	go serve(tlsLn, true)
	go serve(plainLn, false)
	t.Cleanup(func() {
		tlsLn.Close()
		plainLn.Close()
		cancel()
		hp.Close()
		wg.Wait()
		pool.Close()
	})
	return s, tlsLn.Addr().String(), plainLn.Addr().String()
}

// mtlsClient presents id's certificate; h2 selects HTTP/2 over TLS. The
// client does not check the server's name (its certificate has only a SPIFFE
// ID): the server side's verification is what is tested.
func mtlsClient(t *testing.T, ca *mtlstest.CA, ns, sa string, h2 bool) *http.Client {
	s := ca.Workload(t, "cluster.local", ns, sa)
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(ca.RootPEM())
	tc := &tls.Config{Certificates: []tls.Certificate{s.Cert}, InsecureSkipVerify: true, MinVersion: tls.VersionTLS13}
	tr := &http.Transport{TLSClientConfig: tc, DisableCompression: true}
	if h2 {
		var p http.Protocols
		p.SetHTTP2(true)
		tr.Protocols = &p
		tr.ForceAttemptHTTP2 = true
	}
	t.Cleanup(tr.CloseIdleConnections)
	return &http.Client{Transport: tr, Timeout: 10 * time.Second}
}

func TestAuthzEnforced(t *testing.T) {
	app := startApp(t, func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, "app") })
	ca := mtlstest.NewCA(t, "mesh")
	expired := &atomic.Pointer[string]{}
	s, tlsAddr, plainAddr := startAuthzServer(t, ca, func(ln net.Listener) dt.Resources { return inboundAuthz(ln, app) }, expired)
	frontend := mtlsClient(t, ca, "shop", "frontend", false)
	frontendH2 := mtlsClient(t, ca, "shop", "frontend", true)
	bot := mtlsClient(t, ca, "t42", "bot", false)
	other := mtlsClient(t, ca, "other", "x", false)
	plain := client(t)
	stranger := mtlsClient(t, mtlstest.NewCA(t, "elsewhere"), "shop", "frontend", false)

	type want struct {
		code   int
		policy string // x-weft-authz-policy; "" absent
		body   string
	}
	get := func(c *http.Client, url, method string) (want, string, error) {
		req, _ := http.NewRequest(method, url, nil)
		resp, err := c.Do(req)
		if err != nil {
			return want{}, "", err
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return want{code: resp.StatusCode, policy: resp.Header.Get(httpproxy.AuthzPolicyHeader), body: strings.TrimSpace(string(b))}, resp.Header.Get(httpproxy.LocalHeader), nil
	}
	denied := func(policy string) want { return want{http.StatusForbidden, policy, httpproxy.AuthzDeniedBody} }
	ok := want{200, "", "app"}
	https, http1 := "https://"+tlsAddr, "http://"+plainAddr
	for _, tt := range []struct {
		name   string
		c      *http.Client
		url    string
		method string
		want   want
	}{
		{"shop frontend allowed", frontend, https + "/reviews/1", "GET", ok},
		{"shop frontend over h2 allowed", frontendH2, https + "/reviews/1", "GET", ok},
		{"deny /admin names the policy to a mesh peer", frontend, https + "/admin/x", "GET", denied("shop/no-admin")},
		{"deny over h2 too", frontendH2, https + "/admin", "GET", denied("shop/no-admin")},
		{"override blocks the bot first", bot, https + "/reviews/1", "GET", denied("shop/block-bot")},
		{"other namespace: no ALLOW matches", other, https + "/reviews/1", "GET", denied("")},
		{"other namespace: public path allowed", other, https + "/public/a?x=1", "GET", ok},
		{"public is GET only", other, https + "/public/a", "POST", denied("")},
		{"plaintext: public allowed", plain, http1 + "/public/a", "GET", ok},
		{"plaintext: no principal, denied", plain, http1 + "/reviews/1", "GET", denied("")},
		{"plaintext outsider is not told the policy", plain, http1 + "/admin", "GET", denied("")},
		{"double slash refused", frontend, https + "//admin/x", "GET", want{http.StatusBadRequest, "", httpproxy.AuthzPathBody}},
		{"dot segment refused", frontend, https + "/reviews/../admin/x", "GET", want{http.StatusBadRequest, "", httpproxy.AuthzPathBody}},
		{"encoded letter refused", frontendH2, https + "/%61dmin/x", "GET", want{http.StatusBadRequest, "", httpproxy.AuthzPathBody}},
		{"encoded slash refused", plain, http1 + "/public%2F..%2Fadmin", "GET", want{http.StatusBadRequest, "", httpproxy.AuthzPathBody}},
		{"encoded space is data", frontend, https + "/reviews/a%20b", "GET", ok},
	} {
		got, local, err := get(tt.c, tt.url, tt.method)
		if err != nil {
			t.Errorf("%s: %v", tt.name, err)
			continue
		}
		if got != tt.want {
			t.Errorf("%s: got %+v, want %+v", tt.name, got, tt.want)
		}
		if tt.want.code != 200 && local != httpproxy.LocalAuthz {
			t.Errorf("%s: x-weft-local %q, want authz", tt.name, local)
		}
	}
	// A client certificate from another CA never gets as far as authorization.
	if _, _, err := get(stranger, https+"/public/a", "GET"); err == nil {
		t.Error("a certificate from another CA was accepted")
	}
	// Every decision was counted, by policy.
	counts := map[string]uint64{}
	for _, c := range s.state.Counts() {
		counts[c.Policy+" "+c.Action] += c.N
	}
	for k, n := range map[string]uint64{"shop/no-admin DENY": 3, "shop/block-bot OVERRIDE": 1, "none ALLOW": 3, "shop/shop ALLOW": 3, "shop/public ALLOW": 2, "shop/audit AUDIT": 5} {
		if counts[k] != n {
			t.Errorf("count %q = %d, want %d (all: %v)", k, counts[k], n, counts)
		}
	}

	// Authorization state past expiry: every request denied, the allowed ones too.
	reason := "authorization expired (age 24h0m0s > expireAfter 24h0m0s)"
	expired.Store(&reason)
	for _, c := range []*http.Client{frontend, frontendH2, plain} {
		url := https + "/reviews/1"
		if c == plain {
			url = http1 + "/public/a"
		}
		got, _, err := get(c, url, "GET")
		if err != nil {
			t.Fatal(err)
		}
		if got.code != http.StatusForbidden || got.body != httpproxy.AuthzExpiredBody {
			t.Errorf("expired: got %+v, want 403 %q", got, httpproxy.AuthzExpiredBody)
		}
	}
	expired.Store(nil)
	if got, _, _ := get(frontend, https+"/reviews/1", "GET"); got != ok {
		t.Errorf("after expiry cleared: %+v", got)
	}
}

// TestAuthzOutboundUntouched: a listener that is not inbound and has no RBAC
// filters has no engine, and expiry of authorization state does not touch it.
func TestAuthzOutboundUntouched(t *testing.T) {
	app := startApp(t, func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, "app") })
	ln := listen(t)
	s := startSidecar(t, ln, dt.Simple("outbound", addrOf(ln), false, app.ap()), sidecarOpts{proxy: func(c *httpproxy.Config) {
		c.AuthzExpired = func() (string, bool) { return "expired", true }
	}})
	resp, err := client(t).Get("http://" + s.Addr.String() + "/")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != 200 {
		t.Errorf("outbound answered %d", resp.StatusCode)
	}
}

// BenchmarkHTTP1ProxyAuthz is BenchmarkHTTP1Proxy on the inbound listener with
// RBAC filters (an Override, a DENY, an ALLOW that matches, an AUDIT) deciding
// every request: allocs/op must stay 0.
func BenchmarkHTTP1ProxyAuthz(b *testing.B) {
	app := rawApp(b)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	any1 := []*rbacv3.Principal{dt.AnyPrincipal()}
	res := dt.Simple("inbound", addrOf(ln), false, app)
	l := res[xdsresource.ListenerType][0].(*listenerv3.Listener)
	dt.WithHTTPFilters(l,
		dt.HTTPRBAC("weft.override", dt.Rules(rbacv3.RBAC_DENY, rbacPolicies{"shop/block-bot": dt.Policy([]*rbacv3.Permission{dt.AnyPermission()},
			[]*rbacv3.Principal{dt.Principal("spiffe://cluster.local/ns/t42/sa/bot")})}), nil),
		dt.HTTPRBAC("envoy.filters.http.rbac", dt.Rules(rbacv3.RBAC_DENY, rbacPolicies{"shop/no-admin": dt.Policy([]*rbacv3.Permission{dt.PathPrefix("/admin")}, any1)}), nil),
		dt.HTTPRBAC("envoy.filters.http.rbac", dt.Rules(rbacv3.RBAC_ALLOW, rbacPolicies{"shop/get": dt.Policy([]*rbacv3.Permission{dt.AndRules(dt.Method("GET"), dt.PathPrefix("/"))}, any1)}), nil),
		dt.HTTPRBAC("envoy.filters.http.rbac", dt.Rules(rbacv3.RBAC_LOG, rbacPolicies{"shop/audit": dt.Policy([]*rbacv3.Permission{dt.AnyPermission()}, any1)}), nil),
	)
	dt.WithOverrides(l, dt.OverrideTTL{Name: "shop/block-bot", TTL: time.Hour, Revision: 1})
	s := startSidecarB(b, ln, res, sidecarOpts{name: "inbound", proxy: func(c *httpproxy.Config) {
		c.AuthzExpired = func() (string, bool) { return "", false }
	}})
	benchClients(b, s.Addr.String(), nil)
}

// TestAuthzOwnPortJudgesTargetPort: on the inbound listener's own port (where
// peer sidecars connect and pilot routes by Host) the destination port
// authorization judges is the target port of the inbound cluster the request
// is routed to; a request that routes nowhere is still denied before its 404.
func TestAuthzOwnPortJudgesTargetPort(t *testing.T) {
	app := startApp(t, func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, "app") })
	ln := listen(t)
	l := dt.HTTPListener("inbound", addrOf(ln), "routes")
	dt.WithHTTPFilters(l, dt.HTTPRBAC("envoy.filters.http.rbac", dt.Rules(rbacv3.RBAC_ALLOW, rbacPolicies{
		"shop/port-8080": dt.Policy([]*rbacv3.Permission{dt.Port(8080)}, []*rbacv3.Principal{dt.AnyPrincipal()})}), nil))
	r := dt.Resources{}
	r.Add(xdsresource.ListenerType, l)
	r.Add(xdsresource.RouteType, dt.RouteConfig("routes",
		dt.VirtualHost("a", []string{"a"}, dt.PrefixRoute("/", "inbound|8080||", 0)),
		dt.VirtualHost("b", []string{"b"}, dt.PrefixRoute("/", "inbound|9090||", 0))))
	r.Add(xdsresource.ClusterType, dt.EDSCluster("inbound|8080||", dt.ClusterOpts{}), dt.EDSCluster("inbound|9090||", dt.ClusterOpts{}))
	r.Add(xdsresource.EndpointType, dt.Endpoints("inbound|8080||", app.ap()), dt.Endpoints("inbound|9090||", app.ap()))
	s := startSidecar(t, ln, r, sidecarOpts{name: "inbound"})
	c := client(t)
	for _, tc := range []struct {
		host string
		want int
	}{{"a", 200}, {"b", 403}, {"nowhere", 403}} {
		req, _ := http.NewRequest("GET", "http://"+s.Addr.String()+"/x", nil)
		req.Host = tc.host
		resp, err := c.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != tc.want {
			t.Errorf("host %s: %d, want %d", tc.host, resp.StatusCode, tc.want)
		}
	}
}

// TestAuthzGRPC: a gRPC call denied by RBAC on the inbound sidecar ends with
// PERMISSION_DENIED (not UNAVAILABLE, which a client would retry); an allowed
// method goes through.
func TestAuthzGRPC(t *testing.T) {
	app, _ := startGRPC(t)
	ln := listen(t)
	l := dt.Listener("inbound", addrOf(ln), dt.HTTPChain(0, "inbound"))
	dt.WithHTTPFilters(l, dt.HTTPRBAC("envoy.filters.http.rbac", dt.Rules(rbacv3.RBAC_DENY, rbacPolicies{
		"shop/no-watch": dt.Policy([]*rbacv3.Permission{dt.PathExact("/grpc.health.v1.Health/Watch")}, []*rbacv3.Principal{dt.AnyPrincipal()})}), nil))
	r := dt.Resources{}
	r.Add(xdsresource.ListenerType, l)
	r.Add(xdsresource.RouteType, dt.RouteConfig("inbound", dt.VirtualHost("in", []string{"*"}, dt.PrefixRoute("/", "inbound|80||", 0))))
	r.Add(xdsresource.ClusterType, dt.EDSCluster("inbound|80||", dt.ClusterOpts{HTTP2: true}))
	r.Add(xdsresource.EndpointType, dt.Endpoints("inbound|80||", app))
	s := startSidecar(t, ln, r, sidecarOpts{name: "inbound"})
	cc, err := grpc.NewClient(s.Addr.String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer cc.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	hc := healthpb.NewHealthClient(cc)
	if _, err := hc.Check(ctx, &healthpb.HealthCheckRequest{}); err != nil {
		t.Fatalf("allowed Check: %v", err)
	}
	w, err := hc.Watch(ctx, &healthpb.HealthCheckRequest{})
	if err == nil {
		_, err = w.Recv()
	}
	if status.Code(err) != codes.PermissionDenied {
		t.Fatalf("denied Watch: %v, want PermissionDenied", err)
	}
}
