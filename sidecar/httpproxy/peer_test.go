package httpproxy_test

import (
	"bytes"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/netip"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"golang.org/x/net/http2"
	"golang.org/x/net/http2/hpack"

	dt "github.com/weft-mesh/weft/sidecar/dataplane/dataplanetest"
	"github.com/weft-mesh/weft/sidecar/httpproxy"
	"github.com/weft-mesh/weft/sidecar/xdsresource"
)

// tapListener counts accepted connections and records how each began, so a test
// can tell an HTTP/2 hop (the h2c preface) from an HTTP/1.1 one.
type tapListener struct {
	net.Listener
	mu     sync.Mutex
	starts []*bytes.Buffer // first bytes read from each accepted connection
}

func (l *tapListener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err != nil {
		return nil, err
	}
	b := &bytes.Buffer{}
	l.mu.Lock()
	l.starts = append(l.starts, b)
	l.mu.Unlock()
	return &tapConn{Conn: c, l: l, start: b}, nil
}

// conns returns how many connections were accepted and how many began with the
// HTTP/2 client preface.
func (l *tapListener) conns() (all, h2 int) {
	l.mu.Lock()
	defer l.mu.Unlock()
	for _, b := range l.starts {
		all++
		if strings.HasPrefix(b.String(), http2.ClientPreface) {
			h2++
		}
	}
	return all, h2
}

type tapConn struct {
	net.Conn
	l     *tapListener
	start *bytes.Buffer
}

func (c *tapConn) Read(p []byte) (int, error) {
	n, err := c.Conn.Read(p)
	c.l.mu.Lock()
	if rest := len(http2.ClientPreface) - c.start.Len(); rest > 0 && n > 0 {
		c.start.Write(p[:min(n, rest)])
	}
	c.l.mu.Unlock()
	return n, err
}

// peerMesh is an HTTP/1.1 app behind an inbound sidecar, and an outbound sidecar
// whose HTTP (not HTTP2) cluster for host "svc" holds the inbound sidecar as a
// peer endpoint (weft.peer = sidecar, as pilot marks it) and, with static, the app
// itself as a plain Workload endpoint.
type peerMesh struct {
	out     *sidecar
	inbound *tapListener
}

type peerOpts struct {
	static   bool          // also the app as a plain endpoint (round robin with the peer)
	timeout  time.Duration // outbound route timeout
	degraded httpproxy.DegradedFunc
}

func startPeerMesh(t testing.TB, app netip.AddrPort, o peerOpts) *peerMesh {
	t.Helper()
	inLn := &tapListener{Listener: listen(t)}
	in := dt.Resources{}
	in.Add(xdsresource.ListenerType, dt.Listener("inbound", addrOf(inLn), dt.HTTPChain(0, "inbound")))
	in.Add(xdsresource.RouteType, dt.RouteConfig("inbound", dt.VirtualHost("in", []string{"*"}, dt.PrefixRoute("/", "inbound|80||", 0))))
	in.Add(xdsresource.ClusterType, dt.EDSCluster("inbound|80||", dt.ClusterOpts{}))
	in.Add(xdsresource.EndpointType, dt.Endpoints("inbound|80||", app))
	startSidecarTB(t, inLn, in, sidecarOpts{name: "inbound", degraded: o.degraded})

	outLn := listen(t)
	out := dt.Resources{}
	name := "outbound|80||svc.default.svc.cluster.local"
	eps := []netip.AddrPort{addrOf(inLn)}
	if o.static {
		eps = append(eps, app)
	}
	out.Add(xdsresource.ListenerType, dt.HTTPListener("outbound", addrOf(outLn), "80"))
	out.Add(xdsresource.RouteType, dt.RouteConfig("80", dt.VirtualHost("svc", []string{"svc", "svc:80"}, dt.PrefixRoute("/", name, o.timeout))))
	out.Add(xdsresource.ClusterType, dt.EDSCluster(name, dt.ClusterOpts{}))
	out.Add(xdsresource.EndpointType, dt.MarkPeer(dt.Endpoints(name, eps...), addrOf(inLn)))
	return &peerMesh{out: startSidecarTB(t, outLn, out, sidecarOpts{}), inbound: inLn}
}

func (m *peerMesh) url(path string) string { return "http://" + m.out.Addr.String() + path }

func get(t *testing.T, c *http.Client, url string, hdr map[string]string) (*http.Response, string) {
	t.Helper()
	req, err := http.NewRequest(http.MethodGet, url, nil)
	if err != nil {
		t.Fatal(err)
	}
	req.Host = "svc"
	for k, v := range hdr {
		req.Header.Set(k, v)
	}
	resp, err := c.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return resp, string(b)
}

// TestPeerHopMultiplexedHTTP2: HTTP/1.1 clients' concurrent requests cross the
// sidecar-to-sidecar hop as HTTP/2 streams on one connection, and the app behind
// the peer gets plain HTTP/1.1 with the original Host.
func TestPeerHopMultiplexedHTTP2(t *testing.T) {
	const n = 20
	var arrived sync.WaitGroup
	arrived.Add(n)
	all := make(chan struct{})
	go func() { arrived.Wait(); close(all) }()
	var protoErr atomic.Value
	a := startApp(t, func(w http.ResponseWriter, r *http.Request) {
		if r.ProtoMajor != 1 || r.Host != "svc" {
			protoErr.Store(fmt.Sprintf("app got %s for host %q, want HTTP/1.1 for svc", r.Proto, r.Host))
		}
		arrived.Done()
		select { // hold every request until all are in flight together
		case <-all:
		case <-time.After(5 * time.Second):
		}
		io.WriteString(w, "hello "+r.URL.Path)
	})
	m := startPeerMesh(t, a.ap(), peerOpts{})
	c := client(t)
	c.Transport.(*http.Transport).MaxIdleConnsPerHost = n
	var wg sync.WaitGroup
	errs := make(chan error, n)
	for i := range n {
		wg.Go(func() {
			req, _ := http.NewRequest(http.MethodGet, m.url(fmt.Sprintf("/r%d", i)), nil)
			req.Host = "svc"
			resp, err := c.Do(req)
			if err != nil {
				errs <- err
				return
			}
			b, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			if want := fmt.Sprintf("hello /r%d", i); resp.StatusCode != 200 || string(b) != want {
				errs <- fmt.Errorf("got %d %q, want 200 %q", resp.StatusCode, b, want)
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	if v := protoErr.Load(); v != nil {
		t.Error(v)
	}
	if all, h2 := m.inbound.conns(); all != 1 || h2 != 1 {
		t.Errorf("inbound sidecar accepted %d connections (%d HTTP/2), want 1 HTTP/2 connection for %d concurrent requests", all, h2, n)
	}
}

// chunkedBody hides its length so the client sends Transfer-Encoding: chunked.
type chunkedBody struct{ io.Reader }

// TestPeerHopSemantics: bodies, methods, headers, status codes, trailers and the
// route's limits survive HTTP/1.1 → h2 → HTTP/1.1.
func TestPeerHopSemantics(t *testing.T) {
	big := strings.Repeat("0123456789abcdef", 8<<10) // 128 KiB: several DATA frames
	a := startApp(t, func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/echo":
			b, err := io.ReadAll(r.Body)
			if err != nil {
				http.Error(w, err.Error(), 500)
				return
			}
			w.Header().Set("X-Method", r.Method)
			w.Header().Set("X-Len", fmt.Sprint(r.ContentLength))
			w.Header().Set("X-TE", strings.Join(r.TransferEncoding, ","))
			w.Header().Set("X-Hop", r.Header.Get("X-Hop"))
			w.Header().Set("X-Custom", r.Header.Get("X-Custom"))
			w.Write(b)
		case "/stream": // no Content-Length: chunked on HTTP/1.1, with a trailer
			w.Header().Set("Trailer", "X-Sum")
			for i := range 3 {
				fmt.Fprintf(w, "part%d;", i)
				w.(http.Flusher).Flush()
			}
			w.Header().Set("X-Sum", "3")
		case "/teapot":
			w.WriteHeader(http.StatusTeapot)
			io.WriteString(w, "short and stout")
		case "/empty":
			w.WriteHeader(http.StatusNoContent)
		case "/slow":
			<-r.Context().Done()
		}
	})
	m := startPeerMesh(t, a.ap(), peerOpts{timeout: 300 * time.Millisecond})
	c := client(t)
	for _, tc := range []struct {
		name       string
		method     string
		path       string
		body       io.Reader
		hdr        map[string]string
		wantStatus int
		wantBody   string
		wantHdr    map[string]string
		wantTrail  map[string]string
	}{
		{name: "content-length body", method: "POST", path: "/echo", body: strings.NewReader(big), wantStatus: 200, wantBody: big,
			wantHdr: map[string]string{"X-Method": "POST", "X-Len": fmt.Sprint(len(big))}},
		{name: "chunked body", method: "PUT", path: "/echo", body: chunkedBody{strings.NewReader(big)}, wantStatus: 200, wantBody: big,
			wantHdr: map[string]string{"X-Method": "PUT"}},
		{name: "headers, hop-by-hop stripped", method: "GET", path: "/echo",
			hdr:        map[string]string{"Connection": "X-Hop", "X-Hop": "1", "X-Custom": "kept"},
			wantStatus: 200, wantHdr: map[string]string{"X-Hop": "", "X-Custom": "kept"}},
		{name: "chunked response with trailer", method: "GET", path: "/stream", wantStatus: 200, wantBody: "part0;part1;part2;",
			wantTrail: map[string]string{"X-Sum": "3"}},
		{name: "status code", method: "GET", path: "/teapot", wantStatus: http.StatusTeapot, wantBody: "short and stout"},
		{name: "no content", method: "DELETE", path: "/empty", wantStatus: http.StatusNoContent},
		{name: "HEAD", method: "HEAD", path: "/echo", wantStatus: 200, wantHdr: map[string]string{"X-Method": "HEAD"}},
		{name: "route timeout", method: "GET", path: "/slow", wantStatus: http.StatusGatewayTimeout, wantBody: "upstream request timeout\n"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			req, err := http.NewRequest(tc.method, m.url(tc.path), tc.body)
			if err != nil {
				t.Fatal(err)
			}
			req.Host = "svc"
			for k, v := range tc.hdr {
				req.Header.Set(k, v)
			}
			resp, err := c.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			b, err := io.ReadAll(resp.Body)
			resp.Body.Close()
			if err != nil {
				t.Fatal(err)
			}
			if resp.StatusCode != tc.wantStatus || string(b) != tc.wantBody {
				t.Errorf("got %d %d bytes %.40q, want %d %d bytes %.40q", resp.StatusCode, len(b), b, tc.wantStatus, len(tc.wantBody), tc.wantBody)
			}
			for k, v := range tc.wantHdr {
				if got := resp.Header.Get(k); got != v {
					t.Errorf("header %s = %q, want %q", k, got, v)
				}
			}
			for k, v := range tc.wantTrail {
				if got := resp.Trailer.Get(k); got != v {
					t.Errorf("trailer %s = %q, want %q", k, got, v)
				}
			}
		})
	}
	if all, h2 := m.inbound.conns(); all != h2 || all == 0 {
		t.Errorf("inbound accepted %d connections, %d HTTP/2: want all HTTP/2", all, h2)
	}
}

// TestPeerHopPathsNotAliased: many requests on one keep-alive connection, each
// path as long as the last and at the same offset, reach the app with their own
// path. The HTTP/2 client keeps :path values in its HPACK table; a path that was
// a view of the reused request buffer matched later paths by aliasing (found
// under load in CI: the app got /stream for /teapot).
func TestPeerHopPathsNotAliased(t *testing.T) {
	a := startApp(t, func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, r.URL.Path) })
	m := startPeerMesh(t, a.ap(), peerOpts{})
	c := client(t)
	for i := range 2000 {
		want := fmt.Sprintf("/p%05d", i)
		resp, body := get(t, c, m.url(want), nil)
		if resp.StatusCode != 200 || body != want {
			t.Fatalf("request %d: got %d %q, want 200 %q", i, resp.StatusCode, body, want)
		}
	}
	if all, _ := m.inbound.conns(); all != 1 {
		t.Errorf("inbound accepted %d connections, want 1 (one multiplexed hop)", all)
	}
}

// TestPeerDegradedHeader: a peer sidecar failing closed answers 503 with the
// reason header, and the client sidecar passes both through.
func TestPeerDegradedHeader(t *testing.T) {
	a := startApp(t, func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, "app") })
	m := startPeerMesh(t, a.ap(), peerOpts{degraded: func() (string, bool) { return "routes expired", true }})
	resp, _ := get(t, client(t), m.url("/"), nil)
	if resp.StatusCode != http.StatusServiceUnavailable || resp.Header.Get(httpproxy.DegradedHeader) != "routes expired" {
		t.Errorf("got %d %s=%q, want 503 with the peer's reason", resp.StatusCode, httpproxy.DegradedHeader, resp.Header.Get(httpproxy.DegradedHeader))
	}
	if a.reqs.Load() != 0 {
		t.Errorf("app served %d requests through a degraded sidecar", a.reqs.Load())
	}
}

// TestStaticEndpointStaysHTTP1: in a cluster mixing a peer sidecar and a plain
// Workload, the Workload gets the client's HTTP/1.1 directly on the keep-alive
// pool and the peer gets HTTP/2.
func TestStaticEndpointStaysHTTP1(t *testing.T) {
	var mu sync.Mutex
	protos := map[string]int{}
	a := startApp(t, func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		protos[r.Proto]++
		mu.Unlock()
		io.WriteString(w, "ok")
	})
	m := startPeerMesh(t, a.ap(), peerOpts{static: true})
	c := client(t)
	const n = 10
	for range n {
		if resp, body := get(t, c, m.url("/"), nil); resp.StatusCode != 200 || body != "ok" {
			t.Fatalf("got %d %q", resp.StatusCode, body)
		}
	}
	mu.Lock()
	defer mu.Unlock()
	if protos["HTTP/1.1"] != n {
		t.Errorf("app saw %v, want %d HTTP/1.1 requests", protos, n)
	}
	// Round robin: half went through the peer over one HTTP/2 connection; the app
	// saw one connection from the outbound sidecar's pool and one from the peer's.
	if all, h2 := m.inbound.conns(); all != 1 || h2 != 1 {
		t.Errorf("inbound accepted %d connections (%d HTTP/2), want 1 HTTP/2", all, h2)
	}
	if got := a.conns.Load(); got != 2 {
		t.Errorf("app accepted %d connections, want 2 (one keep-alive per sidecar)", got)
	}
}

// fakePeer is a raw HTTP/2 server that refuses the first refusals requests it
// sees (GOAWAY before the stream, or REFUSED_STREAM) and answers every later one
// with "ok".
type fakePeer struct {
	ln       net.Listener
	refusals int64
	conns    atomic.Int64
	reqs     atomic.Int64
	wg       sync.WaitGroup
	mu       sync.Mutex
	open     []net.Conn
}

func startFakePeer(t *testing.T, refuse func(fr *http2.Framer, stream uint32)) *fakePeer {
	t.Helper()
	return startFakePeerN(t, 1, refuse)
}

func startFakePeerN(t *testing.T, refusals int64, refuse func(fr *http2.Framer, stream uint32)) *fakePeer {
	t.Helper()
	p := &fakePeer{ln: listen(t), refusals: refusals}
	p.wg.Go(func() {
		for {
			c, err := p.ln.Accept()
			if err != nil {
				return
			}
			p.conns.Add(1)
			p.mu.Lock()
			p.open = append(p.open, c)
			p.mu.Unlock()
			p.wg.Go(func() { p.serve(c, refuse) })
		}
	})
	t.Cleanup(func() {
		p.ln.Close()
		p.mu.Lock()
		for _, c := range p.open {
			c.Close()
		}
		p.mu.Unlock()
		p.wg.Wait()
	})
	return p
}

func (p *fakePeer) serve(c net.Conn, refuse func(fr *http2.Framer, stream uint32)) {
	defer c.Close()
	preface := make([]byte, len(http2.ClientPreface))
	if _, err := io.ReadFull(c, preface); err != nil || string(preface) != http2.ClientPreface {
		return
	}
	fr := http2.NewFramer(c, c)
	if fr.WriteSettings() != nil {
		return
	}
	for {
		f, err := fr.ReadFrame()
		if err != nil {
			return
		}
		switch f := f.(type) {
		case *http2.SettingsFrame:
			if !f.IsAck() {
				_ = fr.WriteSettingsAck()
			}
		case *http2.PingFrame:
			if !f.IsAck() {
				_ = fr.WritePing(true, f.Data)
			}
		case *http2.HeadersFrame:
			if p.reqs.Add(1) <= p.refusals {
				refuse(fr, f.StreamID)
				continue
			}
			var hb bytes.Buffer
			enc := hpack.NewEncoder(&hb)
			_ = enc.WriteField(hpack.HeaderField{Name: ":status", Value: "200"})
			_ = enc.WriteField(hpack.HeaderField{Name: "content-length", Value: "2"})
			_ = fr.WriteHeaders(http2.HeadersFrameParam{StreamID: f.StreamID, BlockFragment: hb.Bytes(), EndHeaders: true})
			_ = fr.WriteData(f.StreamID, true, []byte("ok"))
		}
	}
}

// TestPeerConnectionRefusalRetried: a request the peer refused unprocessed on a
// pooled HTTP/2 connection (GOAWAY, REFUSED_STREAM) is sent again and succeeds,
// with no retry policy on the route.
func TestPeerConnectionRefusalRetried(t *testing.T) {
	for _, tc := range []struct {
		name      string
		refuse    func(fr *http2.Framer, stream uint32)
		wantConns int64
	}{
		{"GOAWAY before the stream", func(fr *http2.Framer, _ uint32) { _ = fr.WriteGoAway(0, http2.ErrCodeNo, nil) }, 2},
		{"REFUSED_STREAM", func(fr *http2.Framer, s uint32) { _ = fr.WriteRSTStream(s, http2.ErrCodeRefusedStream) }, 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			fp := startFakePeer(t, tc.refuse)
			outLn := listen(t)
			out := dt.Resources{}
			name := "outbound|80||svc.default.svc.cluster.local"
			out.Add(xdsresource.ListenerType, dt.HTTPListener("outbound", addrOf(outLn), "80"))
			out.Add(xdsresource.RouteType, dt.RouteConfig("80", dt.VirtualHost("svc", []string{"svc"}, dt.PrefixRoute("/", name, 2*time.Second))))
			out.Add(xdsresource.ClusterType, dt.EDSCluster(name, dt.ClusterOpts{}))
			out.Add(xdsresource.EndpointType, dt.MarkPeer(dt.Endpoints(name, addrOf(fp.ln)), addrOf(fp.ln)))
			s := startSidecar(t, outLn, out, sidecarOpts{})
			resp, body := get(t, client(t), "http://"+s.Addr.String()+"/", nil)
			if resp.StatusCode != 200 || body != "ok" {
				t.Errorf("got %d %q, want 200 \"ok\"", resp.StatusCode, body)
			}
			if got := fp.reqs.Load(); got != 2 {
				t.Errorf("peer saw %d requests, want 2 (refused, then served)", got)
			}
			if got := fp.conns.Load(); got != tc.wantConns {
				t.Errorf("peer saw %d connections, want %d", got, tc.wantConns)
			}
		})
	}
}

// TestPeerRefusalBound: a request refused unprocessed is sent again at most
// MaxUnprocessedRetries times: refused that often it is then served; refused once
// more the peer sees no further attempt and the client an error answer.
func TestPeerRefusalBound(t *testing.T) {
	refuse := func(fr *http2.Framer, s uint32) { _ = fr.WriteRSTStream(s, http2.ErrCodeRefusedStream) }
	for _, tc := range []struct {
		name     string
		refusals int64
		want     int
	}{
		{"at the bound", httpproxy.MaxUnprocessedRetries, 200},
		{"one past", httpproxy.MaxUnprocessedRetries + 1, 503},
	} {
		t.Run(tc.name, func(t *testing.T) {
			fp := startFakePeerN(t, tc.refusals, refuse)
			outLn := listen(t)
			out := dt.Resources{}
			name := "outbound|80||svc.default.svc.cluster.local"
			out.Add(xdsresource.ListenerType, dt.HTTPListener("outbound", addrOf(outLn), "80"))
			out.Add(xdsresource.RouteType, dt.RouteConfig("80", dt.VirtualHost("svc", []string{"svc"}, dt.PrefixRoute("/", name, 2*time.Second))))
			out.Add(xdsresource.ClusterType, dt.EDSCluster(name, dt.ClusterOpts{}))
			out.Add(xdsresource.EndpointType, dt.MarkPeer(dt.Endpoints(name, addrOf(fp.ln)), addrOf(fp.ln)))
			s := startSidecar(t, outLn, out, sidecarOpts{})
			resp, body := get(t, client(t), "http://"+s.Addr.String()+"/", nil)
			if resp.StatusCode != tc.want {
				t.Errorf("got %d %q, want %d", resp.StatusCode, body, tc.want)
			}
			if got, want := fp.reqs.Load(), int64(httpproxy.MaxUnprocessedRetries+1); got != min(want, tc.refusals+1) {
				t.Errorf("peer saw %d requests, want %d", got, min(want, tc.refusals+1))
			}
		})
	}
}

// closingApp answers every request on a connection with resp and then closes it
// without saying so, like an app whose keep-alive timeout just fired.
func closingApp(t *testing.T, resp string) (netip.AddrPort, *atomic.Int64) {
	t.Helper()
	ln := listen(t)
	var conns atomic.Int64
	var wg sync.WaitGroup
	wg.Go(func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			conns.Add(1)
			wg.Go(func() {
				defer c.Close()
				_ = c.SetDeadline(time.Now().Add(5 * time.Second))
				var head []byte
				buf := make([]byte, 4096)
				for !bytes.Contains(head, []byte("\r\n\r\n")) {
					n, err := c.Read(buf)
					if err != nil {
						return
					}
					head = append(head, buf[:n]...)
				}
				io.WriteString(c, resp)
			})
		}
	})
	t.Cleanup(func() { ln.Close(); wg.Wait() })
	return addrOf(ln), &conns
}

// TestPeerInboundToHTTP1App: behind a peer sidecar, an app connection closed
// while pooled is replaced without failing the request, and a body delimited by
// the connection's close arrives whole.
func TestPeerInboundToHTTP1App(t *testing.T) {
	for _, tc := range []struct {
		name, resp, want string
	}{
		{"stale pooled connection", "HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok", "ok"},
		{"body until close", "HTTP/1.1 200 OK\r\n\r\nuntil-close", "until-close"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			app, conns := closingApp(t, tc.resp)
			m := startPeerMesh(t, app, peerOpts{timeout: 5 * time.Second})
			c := client(t)
			const n = 3
			for i := range n {
				resp, body := get(t, c, m.url("/"), nil)
				if resp.StatusCode != 200 || body != tc.want {
					t.Fatalf("request %d: got %d %q, want 200 %q", i, resp.StatusCode, body, tc.want)
				}
			}
			if got := conns.Load(); got != n {
				t.Errorf("app accepted %d connections, want %d (one per request)", got, n)
			}
		})
	}
}
