package httpproxy_test

import (
	"bufio"
	"io"
	"net"
	"net/http"
	"net/netip"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	dt "github.com/weft-mesh/weft/sidecar/dataplane/dataplanetest"
)

// upReq is one request as a scripted upstream read it.
type upReq struct {
	conn   int64 // which upstream connection (1-based, in accept order)
	method string
	uri    string
	header http.Header
	body   string
}

// scripted is a raw TCP upstream: it reads requests with net/http's parser and
// writes, for the n-th request it read (0-based, across connections), exactly the
// bytes answer returns. It records what it read.
type scripted struct {
	addr  netip.AddrPort
	conns atomic.Int64
	mu    sync.Mutex
	got   []upReq
}

// closeAfter, ending an answer, makes the upstream close the connection after it.
const closeAfter = "\x00close"

func startScripted(t *testing.T, answer func(n int, c net.Conn, r *http.Request) string) *scripted {
	t.Helper()
	s := &scripted{}
	s.addr = dt.ServeTCP(t, func(c net.Conn) {
		id := s.conns.Add(1)
		br := bufio.NewReader(c)
		for {
			r, err := http.ReadRequest(br)
			if err != nil {
				return
			}
			b, err := io.ReadAll(r.Body)
			if err != nil {
				return
			}
			s.mu.Lock()
			n := len(s.got)
			s.got = append(s.got, upReq{conn: id, method: r.Method, uri: r.RequestURI, header: r.Header, body: string(b)})
			s.mu.Unlock()
			out := answer(n, c, r)
			closeIt := strings.HasSuffix(out, closeAfter)
			if _, err := io.WriteString(c, strings.TrimSuffix(out, closeAfter)); err != nil || closeIt {
				return
			}
		}
	})
	return s
}

func (s *scripted) requests() []upReq {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]upReq(nil), s.got...)
}

// okFor is a well-framed answer naming the request, so a shifted response shows.
func okFor(r *http.Request) string {
	b := "resp " + r.RequestURI
	return "HTTP/1.1 200 OK\r\nContent-Length: " + strconv.Itoa(len(b)) + "\r\n\r\n" + b
}

// rawClient is a downstream client connection that writes exact bytes and reads
// responses with net/http's parser.
type rawClient struct {
	t  *testing.T
	c  net.Conn
	br *bufio.Reader
}

func dialRaw(t *testing.T, s *sidecar) *rawClient {
	t.Helper()
	c, err := net.Dial("tcp", s.Addr.String())
	if err != nil {
		t.Fatal(err)
	}
	_ = c.SetDeadline(time.Now().Add(10 * time.Second))
	t.Cleanup(func() { c.Close() })
	return &rawClient{t: t, c: c, br: bufio.NewReader(c)}
}

func (rc *rawClient) send(s string) {
	rc.t.Helper()
	if _, err := io.WriteString(rc.c, s); err != nil {
		rc.t.Fatal(err)
	}
}

// read reads one response to a request of method (net/http needs it for HEAD).
func (rc *rawClient) read(method string) (*http.Response, string) {
	rc.t.Helper()
	resp, err := http.ReadResponse(rc.br, &http.Request{Method: method})
	if err != nil {
		rc.t.Fatalf("reading response: %v", err)
	}
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		rc.t.Fatalf("reading response body: %v", err)
	}
	return resp, string(b)
}

// expectOK reads a 200 that must be the upstream's answer to uri.
func (rc *rawClient) expectOK(uri string) {
	rc.t.Helper()
	resp, body := rc.read("GET")
	if resp.StatusCode != 200 || body != "resp "+uri {
		rc.t.Fatalf("response to %s: %d %q, want 200 %q (responses shifted?)", uri, resp.StatusCode, body, "resp "+uri)
	}
}

// expectEOF checks the sidecar closed the client connection.
func (rc *rawClient) expectEOF() {
	rc.t.Helper()
	if b, err := rc.br.ReadByte(); err == nil {
		rc.t.Fatalf("client connection still open: read %q", b)
	}
}

func getReq(uri string) string { return "GET " + uri + " HTTP/1.1\r\nHost: svc\r\n\r\n" }

func checkUpstreamGot(t *testing.T, s *scripted, want ...string) []upReq {
	t.Helper()
	got := s.requests()
	var uris []string
	for _, r := range got {
		uris = append(uris, r.method+" "+r.uri)
	}
	if strings.Join(uris, ",") != strings.Join(want, ",") {
		t.Fatalf("upstream received %q, want %q", uris, want)
	}
	return got
}

// TestResponseFramingExact (finding 1): an upstream that sends more than its
// response's framing allows never gets its connection back in the pool. The client
// gets the response as framed; the next request pipelined on the same client
// connection and one on another client connection (which would get the pooled
// upstream connection) get their own answers.
func TestResponseFramingExact(t *testing.T) {
	for _, tc := range []struct {
		name     string
		method   string
		first    string // the upstream's answer to the first request
		wantCode int
		wantBody string
		reused   bool // the upstream connection may serve the next request
	}{
		{"well framed (control)", "GET", "HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok", 200, "ok", true},
		{"body on 204", "GET", "HTTP/1.1 204 No Content\r\nContent-Length: 5\r\n\r\nhello", 204, "", false},
		{"bare body on 204", "GET", "HTTP/1.1 204 No Content\r\n\r\nhello", 204, "", false},
		{"body on 304", "GET", "HTTP/1.1 304 Not Modified\r\nContent-Length: 5\r\n\r\nhello", 304, "", false},
		{"body on HEAD", "HEAD", "HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\nhello", 200, "", false},
		{"HEAD, no body (control)", "HEAD", "HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\n", 200, "", true},
		{"more than Content-Length", "GET", "HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nokEXTRA", 200, "ok", false},
		{"smuggled response after Content-Length", "GET",
			"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nokHTTP/1.1 200 OK\r\nContent-Length: 9\r\n\r\nsmuggled!", 200, "ok", false},
		{"Transfer-Encoding on 204", "GET", "HTTP/1.1 204 No Content\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n", 204, "", false},
		{"Transfer-Encoding on 204, nothing after", "GET", "HTTP/1.1 204 No Content\r\nTransfer-Encoding: chunked\r\n\r\n", 204, "", false},
		{"after chunked end", "GET", "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n2\r\nok\r\n0\r\n\r\nEXTRA", 200, "ok", false},
		{"both Content-Length and Transfer-Encoding", "GET",
			"HTTP/1.1 200 OK\r\nContent-Length: 1\r\nTransfer-Encoding: chunked\r\n\r\n2\r\nok\r\n0\r\n\r\n", 200, "ok", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			up := startScripted(t, func(n int, _ net.Conn, r *http.Request) string {
				if n == 0 {
					return tc.first
				}
				return okFor(r)
			})
			ln := listen(t)
			s := startSidecar(t, ln, dt.Simple("outbound", addrOf(ln), false, up.addr), sidecarOpts{})
			a := dialRaw(t, s)
			a.send(tc.method + " /1 HTTP/1.1\r\nHost: svc\r\n\r\n" + getReq("/2"))
			resp, body := a.read(tc.method)
			if resp.StatusCode != tc.wantCode || body != tc.wantBody {
				t.Fatalf("first response: %d %q, want %d %q", resp.StatusCode, body, tc.wantCode, tc.wantBody)
			}
			if te := resp.TransferEncoding; tc.wantCode == 204 && (len(te) > 0 || resp.Header.Get("Content-Length") != "") {
				t.Errorf("204 forwarded with framing headers: TE %q, CL %q", te, resp.Header.Get("Content-Length"))
			}
			a.expectOK("/2")
			b := dialRaw(t, s)
			b.send(getReq("/3"))
			b.expectOK("/3")
			a.send(getReq("/4"))
			a.expectOK("/4")
			got := checkUpstreamGot(t, up, tc.method+" /1", "GET /2", "GET /3", "GET /4")
			if tc.reused && got[1].conn != got[0].conn {
				t.Errorf("a clean response's connection was not reused: requests on connections %d, %d", got[0].conn, got[1].conn)
			}
			if !tc.reused && got[1].conn == got[0].conn {
				t.Errorf("the connection with extra bytes carried the next request")
			}
		})
	}
}

// TestResponseBytesWhileIdle (finding 1): bytes an upstream sends on a pooled
// connection after its response ended (here a whole forged response) make the
// connection unusable: the next client, on another connection, gets its own answer.
func TestResponseBytesWhileIdle(t *testing.T) {
	later := make(chan net.Conn, 1)
	up := startScripted(t, func(n int, c net.Conn, r *http.Request) string {
		if n == 0 {
			later <- c
		}
		return okFor(r)
	})
	ln := listen(t)
	s := startSidecar(t, ln, dt.Simple("outbound", addrOf(ln), false, up.addr), sidecarOpts{})
	a := dialRaw(t, s)
	a.send(getReq("/1"))
	a.expectOK("/1")
	// The response is delivered and the connection pooled: now the upstream writes
	// a response nobody asked for.
	if _, err := io.WriteString(<-later, "HTTP/1.1 200 OK\r\nContent-Length: 8\r\n\r\nunasked!"); err != nil {
		t.Fatal(err)
	}
	b := dialRaw(t, s)
	b.send(getReq("/2"))
	b.expectOK("/2")
	got := checkUpstreamGot(t, up, "GET /1", "GET /2")
	if got[1].conn == got[0].conn {
		t.Errorf("the pooled connection with unsolicited bytes carried the next request")
	}
}
