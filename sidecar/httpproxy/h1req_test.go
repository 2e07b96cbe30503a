package httpproxy_test

import (
	"io"
	"net"
	"net/http"
	"net/netip"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"

	dt "github.com/weft-mesh/weft/sidecar/dataplane/dataplanetest"
	"github.com/weft-mesh/weft/sidecar/httpproxy"
	"github.com/weft-mesh/weft/sidecar/xdsresource"
)

// TestShortFirstRequest (finding 3): a first request shorter than the HTTP/2
// preface is answered at once, not after the header timeout (30 s): the sniff
// decides at the first byte that differs from the preface.
func TestShortFirstRequest(t *testing.T) {
	up := startScripted(t, nil)
	s := simpleSidecar(t, up.addr)
	for _, req := range []string{
		"GET / HTTP/1.0\r\n\r\n",       // 18 bytes, no headers
		"GET /a HTTP/1.0\r\n\r\n",      // 19
		"\r\nGET /b HTTP/1.0\r\n\r\n",  // leading CRLF (RFC 9112 §2.2)
		"PUT /c HTTP/1.0\r\n\r\n",      // shares "P" with "PRI"
		"PRI /d HTTP/1.0\r\n\r\n",      // shares "PRI " with the preface
		"GET /e HTTP/1.1\r\nHost: svc", // incomplete: sent in two writes below
	} {
		c := dialRaw(t, s)
		_ = c.c.SetDeadline(time.Now().Add(5 * time.Second)) // far below ReadHeaderTimeout
		c.send(req)
		uri := strings.Fields(strings.TrimLeft(req, "\r\n"))[1]
		if strings.HasSuffix(req, "svc") {
			c.send("\r\nConnection: close\r\n\r\n")
		}
		resp, body := c.read("GET")
		if resp.StatusCode != 200 || body != "resp "+uri {
			t.Fatalf("%q: %d %q, want 200 from upstream", req, resp.StatusCode, body)
		}
		c.expectClosed() // HTTP/1.0 without keep-alive (and Connection: close)
	}
	got := up.requests()
	if len(got) != 6 || got[0].method != "GET" || got[0].uri != "/" || got[4].method != "PRI" {
		t.Fatalf("upstream received %q", up.uris())
	}
	// Forwarded as HTTP/1.1 with the (empty) Host HTTP/1.1 requires.
	if raw := up.connBytes(got[0].conn); !strings.HasPrefix(raw, "GET / HTTP/1.1\r\nHost: \r\n") {
		t.Errorf("upstream received %q", raw)
	}
	// The next client, on another connection, is not affected.
	b := dialRaw(t, s)
	b.send(getReq("/next"))
	b.expectOK("/next")
}

// badRequests break RFC 9112 in the request head: each must be answered 400 by
// the sidecar, reach the upstream not at all, and end the client connection.
var badRequests = []struct{ name, raw string }{
	{"bare LF after request line", "GET /x HTTP/1.1\nHost: svc\r\n\r\n"},
	{"bare LF after header", "GET /x HTTP/1.1\r\nHost: svc\nX: y\r\n\r\n"},
	{"bare LF ending head", "GET /x HTTP/1.1\r\nHost: svc\r\n\n"},
	{"bare CR in target", "GET /x\rHost: svc HTTP/1.1\r\nHost: svc\r\n\r\n"},
	{"NUL in target", "GET /x\x00y HTTP/1.1\r\nHost: svc\r\n\r\n"},
	{"TAB in target", "GET /x\ty HTTP/1.1\r\nHost: svc\r\n\r\n"},
	{"DEL in target", "GET /x\x7fy HTTP/1.1\r\nHost: svc\r\n\r\n"},
	{"NUL in method", "G\x00T /x HTTP/1.1\r\nHost: svc\r\n\r\n"},
	{"bare CR in method", "G\rT /x HTTP/1.1\r\nHost: svc\r\n\r\n"},
	{"separator in method", "GE(T /x HTTP/1.1\r\nHost: svc\r\n\r\n"},
	{"bare CR in value", "GET /x HTTP/1.1\r\nHost: svc\r\nX: a\rGET /smuggled HTTP/1.1\r\n\r\n"},
	{"NUL in value", "GET /x HTTP/1.1\r\nHost: svc\r\nX: a\x00b\r\n\r\n"},
	{"control byte in value", "GET /x HTTP/1.1\r\nHost: svc\r\nX: a\x01b\r\n\r\n"},
	{"bare CR in name", "GET /x HTTP/1.1\r\nHost: svc\r\nX\rY: b\r\n\r\n"},
	{"NUL in name", "GET /x HTTP/1.1\r\nHost: svc\r\nX\x00Y: b\r\n\r\n"},
	{"space before colon", "GET /x HTTP/1.1\r\nHost : svc\r\n\r\n"},
	{"obs-fold", "GET /x HTTP/1.1\r\nHost: svc\r\nX: a\r\n b\r\n\r\n"},
	{"no colon", "GET /x HTTP/1.1\r\nHost: svc\r\nX\r\n\r\n"},
	{"no Host on HTTP/1.1", "GET /x HTTP/1.1\r\nX: y\r\n\r\n"},
	{"bad Host", "GET /x HTTP/1.1\r\nHost: svc/evil\r\n\r\n"},
	{"two Hosts", "GET /x HTTP/1.1\r\nHost: svc\r\nHost: other\r\n\r\n"},
	{"relative target", "GET x HTTP/1.1\r\nHost: svc\r\n\r\n"},
	{"two spaces", "GET  /x HTTP/1.1\r\nHost: svc\r\n\r\n"},
	{"bad Connection option", "GET /x HTTP/1.1\r\nHost: svc\r\nConnection: a b\r\n\r\n"},
	// Framing conflicts (finding 5).
	{"two Transfer-Encoding headers", "POST /x HTTP/1.1\r\nHost: svc\r\nTransfer-Encoding: chunked\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n"},
	{"chunked, chunked", "POST /x HTTP/1.1\r\nHost: svc\r\nTransfer-Encoding: chunked, chunked\r\n\r\n0\r\n\r\n"},
	{"chunked not last", "POST /x HTTP/1.1\r\nHost: svc\r\nTransfer-Encoding: chunked, gzip\r\n\r\n0\r\n\r\n"},
	{"empty coding", "POST /x HTTP/1.1\r\nHost: svc\r\nTransfer-Encoding: ,chunked\r\n\r\n0\r\n\r\n"},
	{"Transfer-Encoding on HTTP/1.0", "POST /x HTTP/1.0\r\nHost: svc\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n"},
	{"differing Content-Length", "POST /x HTTP/1.1\r\nHost: svc\r\nContent-Length: 1\r\nContent-Length: 2\r\n\r\nab"},
	{"Content-Length list", "POST /x HTTP/1.1\r\nHost: svc\r\nContent-Length: 1, 1\r\n\r\na"},
	{"signed Content-Length", "POST /x HTTP/1.1\r\nHost: svc\r\nContent-Length: +1\r\n\r\na"},
	// Absolute-form targets we refuse (finding 7).
	{"absolute-form with userinfo", "GET http://user@svc/x HTTP/1.1\r\nHost: svc\r\n\r\n"},
	{"absolute-form without host", "GET http:///x HTTP/1.1\r\nHost: svc\r\n\r\n"},
	{"absolute-form query without path", "GET http://svc?q HTTP/1.1\r\nHost: svc\r\n\r\n"},
}

// TestMalformedRequestHead (findings 4, 5): a request head RFC 9112 says to
// reject is answered 400 by the sidecar (x-weft-local: parser), never reaches the
// upstream (not one byte), and ends the client connection, so a request pipelined
// behind it is not read; another client connection is unaffected.
func TestMalformedRequestHead(t *testing.T) {
	up := startScripted(t, nil)
	s := simpleSidecar(t, up.addr)
	for _, tc := range badRequests {
		t.Run(tc.name, func(t *testing.T) {
			c := dialRaw(t, s)
			c.send(tc.raw + getReq("/pipelined"))
			body := c.readLocal(http.StatusBadRequest, httpproxy.LocalParser)
			if !strings.Contains(body, "malformed") {
				t.Errorf("400 body %q does not say what was wrong", body)
			}
		})
	}
	if raw := up.bytes(); raw != "" {
		t.Fatalf("upstream received %q", raw)
	}
	b := dialRaw(t, s)
	b.send(getReq("/after"))
	b.expectOK("/after")
	if got := up.uris(); got != "GET /after" {
		t.Fatalf("upstream received %s", got)
	}
}

// TestUnsupportedTransferCoding: a coding other than chunked is 501 (RFC 9112 §6.1).
func TestUnsupportedTransferCoding(t *testing.T) {
	up := startScripted(t, nil)
	s := simpleSidecar(t, up.addr)
	c := dialRaw(t, s)
	c.send("POST /x HTTP/1.1\r\nHost: svc\r\nTransfer-Encoding: gzip, chunked\r\n\r\n0\r\n\r\n" + getReq("/pipelined"))
	c.readLocal(http.StatusNotImplemented, httpproxy.LocalParser)
	if raw := up.bytes(); raw != "" {
		t.Fatalf("upstream received %q", raw)
	}
}

// TestMalformedChunkedRequestBody (finding 4): a chunked request body whose
// chunk-size line, extension, data terminator or trailer breaks RFC 9112 §7.1 is
// a 400 from the sidecar (not a 503 blaming the upstream). The upstream may have
// received the head and the well-formed chunks before the bad line, never the bad
// line or anything after it, and never a complete request; its connection is
// closed, so the next client's request goes out clean.
func TestMalformedChunkedRequestBody(t *testing.T) {
	const head = "POST /chunked HTTP/1.1\r\nHost: svc\r\nTransfer-Encoding: chunked\r\n\r\n"
	for _, tc := range []struct{ name, body string }{
		{"bare LF after size", "5\nhello\r\n0\r\n\r\n"},
		{"bare CR in size line", "5\rX\r\n"},
		{"size not hex", "zz\r\nhello\r\n0\r\n\r\n"},
		{"size with 0x", "0x5\r\nhello\r\n0\r\n\r\n"},
		{"negative size", "-5\r\nhello\r\n0\r\n\r\n"},
		{"size overflows", "10000000000000005\r\nhello\r\n0\r\n\r\n"},
		{"space after size", "5 \r\nhello\r\n0\r\n\r\n"},
		{"junk after size", "5 x\r\nhello\r\n0\r\n\r\n"},
		{"empty extension", "5;\r\nhello\r\n0\r\n\r\n"},
		{"extension without value", "5;a=\r\nhello\r\n0\r\n\r\n"},
		{"extension with space in name", "5;a b\r\nhello\r\n0\r\n\r\n"},
		{"extension unterminated quote", "5;a=\"b\r\nhello\r\n0\r\n\r\n"},
		{"NUL in extension", "5;a\x00=b\r\nhello\r\n0\r\n\r\n"},
		{"bare CR in extension", "5;a=b\rc\r\nhello\r\n0\r\n\r\n"},
		{"data not followed by CRLF", "5\r\nhelloXX\r\n0\r\n\r\n"},
		{"data followed by bare LF", "5\r\nhello\n0\r\n\r\n"},
		{"trailer without colon", "5\r\nhello\r\n0\r\nBadTrailer\r\n\r\n"},
		{"trailer with bare LF", "5\r\nhello\r\n0\r\nX: y\n\r\n"},
		{"trailer ended by bare LF", "5\r\nhello\r\n0\r\nX: y\r\n\n"},
		{"trailer with bare CR", "5\r\nhello\r\n0\r\nX: a\rb\r\n\r\n"},
		{"trailer with NUL", "5\r\nhello\r\n0\r\nX: a\x00b\r\n\r\n"},
		{"trailer folded", "5\r\nhello\r\n0\r\nX: a\r\n b\r\n\r\n"},
		{"trailer section too long", "5\r\nhello\r\n0\r\n" + strings.Repeat("X-Pad: "+strings.Repeat("p", 1000)+"\r\n", 17) + "\r\n"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			up := startScripted(t, nil)
			s := simpleSidecar(t, up.addr)
			c := dialRaw(t, s)
			c.send(head + tc.body + getReq("/pipelined"))
			c.readLocal(http.StatusBadRequest, httpproxy.LocalParser)
			raw := up.bytes()
			if got := up.uris(); got != "" {
				t.Fatalf("upstream parsed a complete request: %s (%q)", got, raw)
			}
			if strings.Contains(raw, "pipelined") || strings.Contains(raw, "\r\n0\r\n") && !strings.Contains(tc.body, "Trailer") && !strings.HasPrefix(tc.name, "trailer") {
				t.Fatalf("upstream received bytes past the malformed line: %q", raw)
			}
			b := dialRaw(t, s)
			b.send(getReq("/after"))
			b.expectOK("/after")
			// On a fresh connection: the one that had the malformed body is closed.
			if got := up.requests(); len(got) != 1 || got[0].uri != "/after" || !strings.HasPrefix(up.connBytes(got[0].conn), "GET /after ") {
				t.Fatalf("upstream requests %+v; want /after on a fresh connection", got)
			}
		})
	}
}

// TestChunkedRequestBodyForwarded: well-formed chunk extensions (token and
// quoted-string values) and trailers are forwarded as sent; the keep-alive client
// connection then carries the next request.
func TestChunkedRequestBodyForwarded(t *testing.T) {
	up := startScripted(t, nil)
	s := simpleSidecar(t, up.addr)
	c := dialRaw(t, s)
	body := "5;a=b;c=\"q\\\"x y\" ; d\r\nhello\r\n1;e=f\r\n!\r\n0\r\nX-Sum: 6\r\n\r\n"
	c.send("POST /chunked HTTP/1.1\r\nHost: svc\r\nTransfer-Encoding: chunked\r\n\r\n" + body + getReq("/next"))
	c.expectOK("/chunked")
	c.expectOK("/next")
	got := up.requests()
	if len(got) != 2 || got[0].body != "hello!" {
		t.Fatalf("upstream got %+v", got)
	}
	if raw := up.bytes(); !strings.Contains(raw, "\r\n\r\n"+body+"GET /next") {
		t.Errorf("chunked body not forwarded as sent: %q", raw)
	}
}

// TestContentLengthAndTransferEncoding (finding 5): a request with both is read
// by Transfer-Encoding, forwarded without Content-Length, and the client
// connection is closed after the response: what followed is not read as a request.
func TestContentLengthAndTransferEncoding(t *testing.T) {
	up := startScripted(t, nil)
	s := simpleSidecar(t, up.addr)
	c := dialRaw(t, s)
	c.send("POST /clte HTTP/1.1\r\nHost: svc\r\nContent-Length: 4\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhello\r\n0\r\n\r\n" + getReq("/pipelined"))
	resp, body := c.read("POST")
	if resp.StatusCode != 200 || body != "resp /clte" || !resp.Close {
		t.Fatalf("got %d %q close=%v, want the upstream's 200 with Connection: close", resp.StatusCode, body, resp.Close)
	}
	c.expectClosed()
	got := up.requests()
	if len(got) != 1 || got[0].body != "hello" || got[0].header.Get("Content-Length") != "" {
		t.Fatalf("upstream got %+v", got)
	}
	if raw := up.bytes(); strings.Contains(strings.ToLower(raw), "content-length") {
		t.Errorf("Content-Length forwarded: %q", raw)
	}
	// Identical repeated Content-Length values are one value (RFC 9110 §8.6).
	b := dialRaw(t, s)
	b.send("POST /cl2 HTTP/1.1\r\nHost: svc\r\nContent-Length: 2\r\nContent-Length: 2\r\n\r\nok" + getReq("/next"))
	b.expectOK("/cl2")
	b.expectOK("/next")
	if got := up.uris(); got != "POST /clte,POST /cl2,GET /next" {
		t.Fatalf("upstream received %s", got)
	}
}

// TestHopByHopHeaders (finding 6): headers named in Connection and the fixed
// hop-by-hop set are removed in both directions: from the request the upstream
// gets and from the response the client gets (HTTP/1.1 and HTTP/2 clients). TE
// survives only as "trailers".
func TestHopByHopHeaders(t *testing.T) {
	up := startScripted(t, func(_ int, _ net.Conn, r *http.Request) string {
		b := "resp " + r.RequestURI
		return "HTTP/1.1 200 OK\r\nConnection: X-Up-Secret, keep-alive\r\nX-Up-Secret: 1\r\nKeep-Alive: timeout=5\r\n" +
			"Proxy-Connection: keep-alive\r\nX-Kept: yes\r\nContent-Length: " + strconv.Itoa(len(b)) + "\r\n\r\n" + b
	})
	s := simpleSidecar(t, up.addr)
	c := dialRaw(t, s)
	c.send("GET /hop HTTP/1.1\r\nHost: svc\r\nConnection: X-Secret, keep-alive\r\nX-Secret: 1\r\nKeep-Alive: timeout=5\r\n" +
		"Proxy-Connection: keep-alive\r\nTE: trailers, deflate\r\nX-End: yes\r\n\r\n" +
		"GET /te HTTP/1.1\r\nHost: svc\r\nTE: deflate\r\nConnection: te\r\n\r\n")
	for _, uri := range []string{"/hop", "/te"} {
		resp, body := c.read("GET")
		if resp.StatusCode != 200 || body != "resp "+uri {
			t.Fatalf("%s: %d %q", uri, resp.StatusCode, body)
		}
		for _, h := range []string{"X-Up-Secret", "Keep-Alive", "Proxy-Connection"} {
			if v := resp.Header.Get(h); v != "" {
				t.Errorf("%s: client got hop-by-hop response header %s: %q", uri, h, v)
			}
		}
		if resp.Header.Get("X-Kept") != "yes" {
			t.Errorf("%s: end-to-end response header dropped", uri)
		}
	}
	got := up.requests()
	if len(got) != 2 {
		t.Fatalf("upstream got %s", up.uris())
	}
	for _, h := range []string{"X-Secret", "Keep-Alive", "Proxy-Connection", "Connection"} {
		if v := got[0].header.Get(h); v != "" {
			t.Errorf("upstream got hop-by-hop request header %s: %q", h, v)
		}
	}
	if got[0].header.Get("X-End") != "yes" || got[0].header.Get("Te") != "trailers" {
		t.Errorf("upstream headers %v: want X-End kept and TE: trailers", got[0].header)
	}
	if v := got[1].header.Get("Te"); v != "" {
		t.Errorf("TE without trailers forwarded: %q", v)
	}
	// Another client connection, over HTTP/2: the response is filtered the same way.
	resp, body := get(t, h2cClient(t), "http://"+s.Addr.String()+"/h2", nil)
	if resp.StatusCode != 200 || body != "resp /h2" || resp.Header.Get("X-Up-Secret") != "" || resp.Header.Get("Keep-Alive") != "" || resp.Header.Get("X-Kept") != "yes" {
		t.Errorf("HTTP/2 client: %d %q %v", resp.StatusCode, body, resp.Header)
	}
}

// TestAbsoluteForm (finding 7): an absolute-form target is routed by its
// authority, which overrides Host (RFC 9112 §3.2.2), and goes upstream in
// origin form with Host set to that authority.
func TestAbsoluteForm(t *testing.T) {
	svc, other := startScripted(t, nil), startScripted(t, nil)
	ln := listen(t)
	res := dt.Resources{}
	res.Add(xdsresource.ListenerType, dt.HTTPListener("outbound", addrOf(ln), "routes"))
	res.Add(xdsresource.RouteType, dt.RouteConfig("routes",
		dt.VirtualHost("svc", []string{"svc", "svc:80"}, dt.PrefixRoute("/", "svc", 0)),
		dt.VirtualHost("other", []string{"other"}, dt.PrefixRoute("/", "other", 0))))
	res.Add(xdsresource.ClusterType, dt.EDSCluster("svc", dt.ClusterOpts{}), dt.EDSCluster("other", dt.ClusterOpts{}))
	res.Add(xdsresource.EndpointType, dt.Endpoints("svc", svc.addr), dt.Endpoints("other", other.addr))
	s := startSidecar(t, ln, res, sidecarOpts{})
	c := dialRaw(t, s)
	c.send("GET http://svc/p?q=1 HTTP/1.1\r\nHost: other\r\n\r\n" +
		"GET HTTP://svc:80 HTTP/1.1\r\nHost: other\r\n\r\n" +
		"GET https://svc/s HTTP/1.1\r\n\r\n" + // no Host: the authority is enough
		"GET /origin HTTP/1.1\r\nHost: other\r\n\r\n")
	for _, uri := range []string{"/p?q=1", "/", "/s", "/origin"} {
		c.expectOK(uri)
	}
	got := svc.requests()
	if len(got) != 3 || got[0].uri != "/p?q=1" || got[1].uri != "/" || got[2].uri != "/s" {
		t.Fatalf("svc got %s", svc.uris())
	}
	raw := svc.bytes()
	if !strings.HasPrefix(raw, "GET /p?q=1 HTTP/1.1\r\nHost: svc\r\n") || strings.Contains(raw, "other") || !strings.Contains(raw, "GET / HTTP/1.1\r\nHost: svc:80\r\n") {
		t.Errorf("svc received %q", raw)
	}
	if got := other.uris(); got != "GET /origin" {
		t.Errorf("other got %s", got)
	}
}

// TestURITooLong (finding 7): a target of DefaultMaxURIBytes is forwarded; one
// byte more is a 414 from the sidecar.
func TestURITooLong(t *testing.T) {
	up := startScripted(t, nil)
	s := simpleSidecar(t, up.addr)
	atBound := "/" + strings.Repeat("a", httpproxy.DefaultMaxURIBytes-1)
	c := dialRaw(t, s)
	c.send(getReq(atBound) + getReq("/next"))
	c.expectOK(atBound)
	c.expectOK("/next")
	c = dialRaw(t, s)
	c.send(getReq(atBound+"b") + getReq("/pipelined"))
	c.readLocal(http.StatusRequestURITooLong, httpproxy.LocalParser)
	// Longer than the read buffer (16 KiB): the same answer.
	c = dialRaw(t, s)
	c.send(getReq("/" + strings.Repeat("c", 20<<10)))
	c.readLocal(http.StatusRequestURITooLong, httpproxy.LocalParser)
	if got := up.uris(); got != "GET "+atBound+",GET /next" {
		t.Fatalf("upstream got %.80s", got)
	}
	b := dialRaw(t, s)
	b.send(getReq("/after"))
	b.expectOK("/after")
}

// TestMaxURIBytesValidated: the limit is checked in New.
func TestMaxURIBytesValidated(t *testing.T) {
	pool := validationPool(t)
	for _, tc := range []struct {
		buf, uri int
		ok       bool
	}{
		{0, 0, true}, {0, 63, false}, {0, 64, true}, {16 << 10, 15 << 10, true}, {16 << 10, 15<<10 + 1, false}, {4096, 0, true},
	} {
		p, err := httpproxy.New(httpproxy.Config{Logger: hclog.NewNullLogger(), Pool: pool, BufferSize: tc.buf, MaxURIBytes: tc.uri})
		if (err == nil) != tc.ok {
			t.Errorf("BufferSize %d MaxURIBytes %d: err %v, want ok=%v", tc.buf, tc.uri, err, tc.ok)
		}
		if p != nil {
			p.Close()
		}
	}
}

// TestLocalAnswersNamed: every answer the sidecar generates itself says which
// part answered (x-weft-local), over HTTP/1.1 and HTTP/2; a 404 names the host and
// port it looked for and the ports that host is served on.
func TestLocalAnswersNamed(t *testing.T) {
	up := startScripted(t, nil)
	ln := listen(t)
	res := dt.Resources{}
	res.Add(xdsresource.ListenerType, dt.Listener("outbound", addrOf(ln), dt.HTTPChain(9080, "9080"), dt.HTTPChain(80, "80")))
	res.Add(xdsresource.RouteType,
		dt.RouteConfig("9080", dt.VirtualHost("svc", []string{"svc:9080"}, dt.PrefixRoute("/", "up", 0))),
		dt.RouteConfig("80", dt.VirtualHost("web", []string{"web", "web:80"},
			dt.PrefixRoute("/dead", "dead", 0), dt.PrefixRoute("/up", "up", 0))))
	res.Add(xdsresource.ClusterType, dt.EDSCluster("up", dt.ClusterOpts{Connect: time.Second}), dt.EDSCluster("dead", dt.ClusterOpts{Connect: time.Second}))
	res.Add(xdsresource.EndpointType, dt.Endpoints("up", up.addr), dt.Endpoints("dead", deadAddr(t)))
	s := startSidecar(t, ln, res, sidecarOpts{})
	base := "http://" + s.Addr.String()
	for _, tc := range []struct {
		host, path string
		code       int
		local      string
		body       string
	}{
		{"svc:1234", "/", 404, httpproxy.LocalRouter, `looked for host "svc:1234" port 1234 on listener outbound; host "svc" is served on port 9080`},
		{"nosuch", "/", 404, httpproxy.LocalRouter, `no virtual host for host: looked for host "nosuch" port 80`},
		{"web", "/none", 404, httpproxy.LocalRouter, `no route for path "/none" on host "web" port 80`},
		{"web", "/dead", 503, httpproxy.LocalUpstreamConnect, "upstream connect error"},
		{"web", "/up", 200, "", "resp /up"},
	} {
		for _, c := range []*http.Client{client(t), h2cClient(t)} {
			resp, body := do(t, c, "GET", base+tc.path, tc.host, "")
			if resp.StatusCode != tc.code || resp.Header.Get(httpproxy.LocalHeader) != tc.local || !strings.Contains(body, tc.body) {
				t.Errorf("%s %s%s: %d %s=%q %q, want %d %q containing %q", resp.Proto, tc.host, tc.path, resp.StatusCode,
					httpproxy.LocalHeader, resp.Header.Get(httpproxy.LocalHeader), body, tc.code, tc.local, tc.body)
			}
		}
	}
}

// TestLocalAnswersTimeoutDegraded: a route timeout (504) and failing closed (503)
// are named too, over HTTP/1.1 and HTTP/2.
func TestLocalAnswersTimeoutDegraded(t *testing.T) {
	silent := dt.ServeTCP(t, func(c net.Conn) { _, _ = io.Copy(io.Discard, c) }) // reads, never answers
	ln := listen(t)
	s := startSidecar(t, ln, oneRoute(addrOf(ln), dt.PrefixRoute("/", "silent", 200*time.Millisecond),
		map[string][]netip.AddrPort{"silent": {silent}}), sidecarOpts{})
	for _, c := range []*http.Client{client(t), h2cClient(t)} {
		resp, body := do(t, c, "GET", "http://"+s.Addr.String()+"/slow", "svc", "")
		if resp.StatusCode != 504 || resp.Header.Get(httpproxy.LocalHeader) != httpproxy.LocalTimeout || resp.Header.Get(httpproxy.TimeoutHeader) != "route=200ms" {
			t.Errorf("%s: %d %v %q, want 504 from %q", resp.Proto, resp.StatusCode, resp.Header, body, httpproxy.LocalTimeout)
		}
	}
	ln = listen(t)
	d := startSidecar(t, ln, oneRoute(addrOf(ln), dt.PrefixRoute("/", "silent", 0), map[string][]netip.AddrPort{"silent": {silent}}),
		sidecarOpts{degraded: func() (string, bool) { return "routes expired", true }})
	for _, c := range []*http.Client{client(t), h2cClient(t)} {
		resp, body := do(t, c, "GET", "http://"+d.Addr.String()+"/", "svc", "")
		if resp.StatusCode != 503 || resp.Header.Get(httpproxy.LocalHeader) != httpproxy.LocalDegraded || resp.Header.Get(httpproxy.DegradedHeader) != "routes expired" {
			t.Errorf("%s: %d %v %q, want 503 from %q", resp.Proto, resp.StatusCode, resp.Header, body, httpproxy.LocalDegraded)
		}
	}
}
