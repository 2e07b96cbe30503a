package httpproxy_test

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptrace"
	"net/netip"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	dt "github.com/weft-mesh/weft/sidecar/dataplane/dataplanetest"
	"github.com/weft-mesh/weft/sidecar/httpproxy"
)

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

// TestInterimResponses (finding 2): 1xx responses other than 101 are relayed to an
// HTTP/1.1 client as they arrive (the final response waits until the client has
// the 103), dropped for an HTTP/1.0 client, and the final response follows on the
// same upstream connection, which stays pooled.
func TestInterimResponses(t *testing.T) {
	sawHint := make(chan struct{}, 1)
	s, up := scriptedSidecar(t, sidecarOpts{}, func(n int, c net.Conn, r *http.Request) string {
		switch r.RequestURI {
		case "/hints":
			if _, err := io.WriteString(c, "HTTP/1.1 103 Early Hints\r\nLink: </style.css>; rel=preload\r\n\r\n"); err != nil {
				return ""
			}
			select { // the final response only once the client saw the hint
			case <-sawHint:
			case <-time.After(5 * time.Second):
				return "HTTP/1.1 500 hint never relayed\r\nContent-Length: 0\r\n\r\n"
			}
			return "HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 102 Processing\r\n\r\n" + okFor(r)
		case "/hints10":
			return "HTTP/1.1 103 Early Hints\r\nLink: </a.css>; rel=preload\r\n\r\n" + okFor(r)
		}
		return okFor(r)
	})
	a := dialRaw(t, s)
	a.send(getReq("/hints") + getReq("/2"))
	resp, _ := a.read("GET")
	if resp.StatusCode != 103 || resp.Header.Get("Link") != "</style.css>; rel=preload" {
		t.Fatalf("first response %d %v, want 103 with the Link header", resp.StatusCode, resp.Header)
	}
	sawHint <- struct{}{}
	for _, want := range []int{100, 102} {
		if resp, _ := a.read("GET"); resp.StatusCode != want {
			t.Fatalf("interim response %d, want %d", resp.StatusCode, want)
		}
	}
	a.expectOK("/hints")
	a.expectOK("/2")
	b := dialRaw(t, s)
	b.send(getReq("/3"))
	b.expectOK("/3")

	// HTTP/1.0 clients never see a 1xx (RFC 9110 §15.2).
	c := dialRaw(t, s)
	c.send("GET /hints10 HTTP/1.0\r\nHost: svc\r\n\r\n")
	c.expectOK("/hints10")
	c.expectClosed()
	got := checkUpstreamGot(t, up, "GET /hints", "GET /2", "GET /3", "GET /hints10")
	for _, r := range got[1:] {
		if r.conn != got[0].conn {
			t.Errorf("interim responses cost the pooled connection: %s on connection %d, first on %d", r.uri, r.conn, got[0].conn)
		}
	}
}

// TestInterimResponsesBound: MaxInterimResponses 1xx before the final response are
// relayed; one more is a 502 naming the problem, and that upstream connection is not
// reused.
func TestInterimResponsesBound(t *testing.T) {
	s, up := scriptedSidecar(t, sidecarOpts{}, func(n int, c net.Conn, r *http.Request) string {
		k, _ := strconv.Atoi(strings.TrimPrefix(r.RequestURI, "/interim/"))
		return strings.Repeat("HTTP/1.1 103 Early Hints\r\n\r\n", k) + okFor(r)
	})
	for _, tc := range []struct {
		n    int
		want int
	}{{httpproxy.MaxInterimResponses, 200}, {httpproxy.MaxInterimResponses + 1, 502}} {
		a := dialRaw(t, s)
		uri := "/interim/" + strconv.Itoa(tc.n)
		a.send(getReq(uri))
		relayed := 0
		for {
			resp, body := a.read("GET")
			if resp.StatusCode == 103 {
				relayed++
				continue
			}
			if resp.StatusCode != tc.want {
				t.Fatalf("%d interim: final %d %q, want %d", tc.n, resp.StatusCode, body, tc.want)
			}
			if tc.want == 502 && !strings.Contains(body, "more than 16 interim (1xx) responses") {
				t.Errorf("502 body %q does not name the problem", body)
			}
			break
		}
		if tc.want == 200 && relayed != tc.n {
			t.Errorf("relayed %d interim responses, want %d", relayed, tc.n)
		}
	}
	b := dialRaw(t, s)
	b.send(getReq("/next"))
	b.expectOK("/next")
	got := checkUpstreamGot(t, up, "GET /interim/16", "GET /interim/17", "GET /next")
	if got[2].conn == got[1].conn {
		t.Error("the connection that broke the bound carried the next request")
	}
}

// TestExpectContinueNetHTTP (finding 2): net/http's client (which sends the body
// only after 100 Continue, within ExpectContinueTimeout) and net/http's server
// (which sends 100 when the handler reads the body) agree through the sidecar.
func TestExpectContinueNetHTTP(t *testing.T) {
	a := startApp(t, func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		fmt.Fprintf(w, "expect=%s body=%s", r.Header.Get("Expect"), b)
	})
	ln := listen(t)
	s := startSidecar(t, ln, dt.Simple("outbound", addrOf(ln), false, a.ap()), sidecarOpts{})
	// A long client-side wait: the body goes only if a 100 Continue arrives.
	tr := &http.Transport{ExpectContinueTimeout: time.Minute, DisableCompression: true}
	t.Cleanup(tr.CloseIdleConnections)
	c := &http.Client{Transport: tr, Timeout: 10 * time.Second}
	for i := range 2 { // the second request reuses both connections
		var got100 atomic.Bool
		ctx := httptrace.WithClientTrace(context.Background(), &httptrace.ClientTrace{Got100Continue: func() { got100.Store(true) }})
		req, err := http.NewRequestWithContext(ctx, "PUT", "http://"+s.Addr.String()+"/up", strings.NewReader("payload"))
		if err != nil {
			t.Fatal(err)
		}
		req.Host = "svc"
		req.Header.Set("Expect", "100-continue")
		start := time.Now()
		resp, err := c.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != 200 || string(body) != "expect=100-continue body=payload" {
			t.Fatalf("request %d: %d %q", i, resp.StatusCode, body)
		}
		if !got100.Load() {
			t.Errorf("request %d: the client never got 100 Continue", i)
		}
		if d := time.Since(start); d > 5*time.Second {
			t.Errorf("request %d took %v", i, d)
		}
	}
	if n := a.conns.Load(); n != 1 {
		t.Errorf("app saw %d connections, want 1 (kept alive across Expect)", n)
	}
}

// TestExpectContinueScripted (finding 2): exact bytes. The upstream answers 100 to
// the head, reads the body, then answers; one that answers finally without asking
// for the body closes both connections (the client's body was never sent); one
// that stays silent gets the body after ExpectContinueTimeout, the client a 100
// from the sidecar.
func TestExpectContinueScripted(t *testing.T) {
	const wait = 200 * time.Millisecond
	up := serveScripted(t, func(up *scripted, id int64, c net.Conn, br *bufio.Reader) {
		for {
			r, err := http.ReadRequest(br)
			if err != nil {
				return
			}
			var body []byte
			switch r.RequestURI {
			case "/continue":
				if br.Buffered() > 0 {
					io.WriteString(c, "HTTP/1.1 500 body before 100\r\nContent-Length: 0\r\n\r\n")
					return
				}
				io.WriteString(c, "HTTP/1.1 100 Continue\r\n\r\n")
				body, _ = io.ReadAll(r.Body)
			case "/refuse":
				up.record(id, r, "")
				io.WriteString(c, "HTTP/1.1 417 Expectation Failed\r\nContent-Length: 4\r\n\r\nnope")
				continue
			default: // silent about Expect: just reads the body
				body, _ = io.ReadAll(r.Body)
			}
			up.record(id, r, string(body))
			io.WriteString(c, okFor(r)+"|"+string(body)[:0])
		}
	})
	ln := listen(t)
	s := startSidecar(t, ln, dt.Simple("outbound", addrOf(ln), false, up.addr), sidecarOpts{expectTimeout: wait})
	put := func(uri string) string {
		return "PUT " + uri + " HTTP/1.1\r\nHost: svc\r\nExpect: 100-continue\r\nContent-Length: 5\r\n\r\n"
	}

	a := dialRaw(t, s)
	a.send(put("/continue"))
	if resp, _ := a.read("PUT"); resp.StatusCode != 100 {
		t.Fatalf("got %d, want 100 Continue before sending the body", resp.StatusCode)
	}
	a.send("hello" + getReq("/2"))
	a.expectOK("/continue")
	a.expectOK("/2")

	b := dialRaw(t, s)
	b.send(put("/refuse"))
	resp, body := b.read("PUT")
	if resp.StatusCode != 417 || body != "nope" || !resp.Close {
		t.Fatalf("refusal: %d %q close=%v, want 417 \"nope\" with Connection: close", resp.StatusCode, body, resp.Close)
	}
	b.expectClosed()

	c := dialRaw(t, s)
	start := time.Now()
	c.send(put("/silent"))
	if resp, _ := c.read("PUT"); resp.StatusCode != 100 {
		t.Fatalf("silent upstream: got %d, want the sidecar's 100 Continue", resp.StatusCode)
	}
	if d := time.Since(start); d < wait {
		t.Errorf("the sidecar's 100 came after %v, before ExpectContinueTimeout %v", d, wait)
	}
	c.send("world")
	c.expectOK("/silent")
	d := dialRaw(t, s)
	d.send(getReq("/3"))
	d.expectOK("/3")

	got := checkUpstreamGot(t, up, "PUT /continue", "GET /2", "PUT /refuse", "PUT /silent", "GET /3")
	for i, want := range []string{"hello", "", "", "world", ""} {
		if got[i].body != want {
			t.Errorf("upstream got body %q for %s, want %q", got[i].body, got[i].uri, want)
		}
	}
	if got[3].conn == got[2].conn {
		t.Error("the connection whose request body was never sent carried the next request")
	}
}

// TestHTTP10ClientNeverChunked (finding 5): an HTTP/1.0 client gets a chunked
// response's content, close-delimited, without Transfer-Encoding, and its
// connection closed; the upstream connection stays pooled and an HTTP/1.1 client
// gets the next chunked response as chunked. An HTTP/1.0 keep-alive client of a
// Content-Length response is told keep-alive and kept.
func TestHTTP10ClientNeverChunked(t *testing.T) {
	const chunked = "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\nTrailer: X-Sum\r\n\r\n5\r\nhello\r\n6;ext=1\r\n world\r\n0\r\nX-Sum: 11\r\n\r\n"
	s, up := scriptedSidecar(t, sidecarOpts{}, func(n int, c net.Conn, r *http.Request) string {
		if strings.HasPrefix(r.RequestURI, "/chunked") {
			return chunked
		}
		return okFor(r)
	})
	a := dialRaw(t, s)
	a.send("GET /chunked HTTP/1.0\r\nHost: svc\r\nConnection: keep-alive\r\n\r\n")
	raw, err := io.ReadAll(a.br)
	if err != nil {
		t.Fatal(err)
	}
	head, body, _ := strings.Cut(string(raw), "\r\n\r\n")
	if body != "hello world" {
		t.Errorf("HTTP/1.0 client got body %q, want the content de-chunked", body)
	}
	lh := strings.ToLower(head)
	if strings.Contains(lh, "transfer-encoding") || !strings.Contains(lh, "connection: close") {
		t.Errorf("HTTP/1.0 client got head %q: want no Transfer-Encoding, Connection: close", head)
	}

	b := dialRaw(t, s)
	b.send(getReq("/chunked2"))
	resp, body2 := b.read("GET")
	if len(resp.TransferEncoding) != 1 || body2 != "hello world" || resp.Trailer.Get("X-Sum") != "11" {
		t.Errorf("HTTP/1.1 client: TE %q body %q trailer %v, want chunked with the trailer", resp.TransferEncoding, body2, resp.Trailer)
	}
	b.send(getReq("/3"))
	b.expectOK("/3")

	c := dialRaw(t, s)
	c.send("GET /ka1 HTTP/1.0\r\nHost: svc\r\nConnection: keep-alive\r\n\r\nGET /ka2 HTTP/1.0\r\nHost: svc\r\nConnection: keep-alive\r\n\r\n")
	for _, uri := range []string{"/ka1", "/ka2"} {
		resp, body := c.read("GET")
		if resp.StatusCode != 200 || body != "resp "+uri || resp.Header.Get("Connection") != "keep-alive" {
			t.Fatalf("HTTP/1.0 keep-alive %s: %d %q Connection %q", uri, resp.StatusCode, body, resp.Header.Get("Connection"))
		}
	}
	got := checkUpstreamGot(t, up, "GET /chunked", "GET /chunked2", "GET /3", "GET /ka1", "GET /ka2")
	for _, r := range got[1:] {
		if r.conn != got[0].conn {
			t.Errorf("%s on upstream connection %d, want the pooled %d", r.uri, r.conn, got[0].conn)
		}
	}
}

// TestMalformedUpstreamResponse (finding 4, response half): a malformed response head
// is a 502 from the sidecar naming the upstream problem, and that connection is
// discarded, also when the malformed chunk came with the head. The next request,
// pipelined, is not answered (the connection closes after a 502); one on another
// client connection gets its own answer.
func TestMalformedUpstreamResponse(t *testing.T) {
	for _, tc := range []struct {
		name, resp string
		want       string // in the 502 body
	}{
		{"bare LF in a header", "HTTP/1.1 200 OK\r\nX-A: a\nContent-Length: 2\r\n\r\nok", "malformed"},
		{"bare CR in a header value", "HTTP/1.1 200 OK\r\nX-A: a\rb\r\nContent-Length: 2\r\n\r\nok", "malformed"},
		{"NUL in a header value", "HTTP/1.1 200 OK\r\nX-A: a\x00b\r\nContent-Length: 2\r\n\r\nok", "malformed"},
		{"bare CR in the status line", "HTTP/1.1 200 O\rK\r\nContent-Length: 2\r\n\r\nok", "malformed"},
		{"bare LF ending the status line", "HTTP/1.1 200 OK\nContent-Length: 2\r\n\r\nok", "malformed"},
		{"invalid chunk extension", "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n2;a b\r\nok\r\n0\r\n\r\n", "chunk"},
		{"bare CR in a trailer", "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n2\r\nok\r\n0\r\nX-T: a\rb\r\n\r\n", "malformed"},
		{"status line too long", "HTTP/1.1 200 " + strings.Repeat("k", 9000) + "\r\nContent-Length: 2\r\n\r\nok", "status line longer than 8192 bytes"},
		{"empty line before the status line", "\r\nHTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok", "empty line before the status line"},
		{"version not a digit", "HTTP/1.A 200 OK\r\nContent-Length: 2\r\n\r\nok", "status line"},
		{"Transfer-Encoding on HTTP/1.0", "HTTP/1.0 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n2\r\nok\r\n0\r\n\r\n", "Transfer-Encoding in an HTTP/1.0 response"},
		{"bad status line", "HTTP/1.1 2x0 OK\r\nContent-Length: 2\r\n\r\nok", "status"},
		{"not HTTP", "SSH-2.0-OpenSSH\r\n\r\n", "status line"},
		{"header without colon", "HTTP/1.1 200 OK\r\nbroken\r\nContent-Length: 2\r\n\r\nok", "malformed"},
		{"bad Content-Length", "HTTP/1.1 200 OK\r\nContent-Length: 2x\r\n\r\nok", "content-length"},
		{"unsupported Transfer-Encoding", "HTTP/1.1 200 OK\r\nTransfer-Encoding: gzip\r\n\r\nok", "transfer-encoding"},
		{"unsolicited 101", "HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n\r\n", "101 Switching Protocols to a request that asked for no upgrade"},
		{"invalid chunk size", "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\nok\r\n0\r\n\r\n", "chunk size"},
		{"chunk without CRLF", "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n2\r\nokXX0\r\n\r\n", "chunk data not followed by CRLF"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s, up := scriptedSidecar(t, sidecarOpts{}, func(n int, c net.Conn, r *http.Request) string {
				if n == 0 {
					return tc.resp
				}
				return okFor(r)
			})
			a := dialRaw(t, s)
			a.send(getReq("/1") + getReq("/2"))
			resp, body := a.read("GET")
			if resp.StatusCode != 502 || !strings.Contains(body, "invalid response from upstream") || !strings.Contains(body, tc.want) {
				t.Fatalf("got %d %q, want 502 naming %q", resp.StatusCode, body, tc.want)
			}
			a.expectClosed()
			b := dialRaw(t, s)
			b.send(getReq("/3"))
			b.expectOK("/3")
			got := checkUpstreamGot(t, up, "GET /1", "GET /3")
			if got[1].conn == got[0].conn {
				t.Error("the connection that sent a malformed response carried the next request")
			}
		})
	}
}

// TestMalformedChunkMidBody (finding 4): a bad chunk after part of the body reached
// the client cannot become a status any more: the client connection closes with the
// body unterminated (net/http reports it truncated), for an HTTP/1.0 client (whose
// body is close-delimited) the connection is reset; the upstream connection is
// discarded.
func TestMalformedChunkMidBody(t *testing.T) {
	for _, proto := range []string{"HTTP/1.1", "HTTP/1.0"} {
		t.Run(proto, func(t *testing.T) {
			sawFirst := make(chan struct{})
			s, up := scriptedSidecar(t, sidecarOpts{}, func(n int, c net.Conn, r *http.Request) string {
				if n > 0 {
					return okFor(r)
				}
				io.WriteString(c, "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nfirst\r\n")
				<-sawFirst
				return "zz\r\nsecond\r\n0\r\n\r\n"
			})
			a := dialRaw(t, s)
			a.send("GET /1 " + proto + "\r\nHost: svc\r\n\r\n")
			resp, err := http.ReadResponse(a.br, &http.Request{Method: "GET"})
			if err != nil {
				t.Fatal(err)
			}
			first := make([]byte, 5)
			if _, err := io.ReadFull(resp.Body, first); err != nil || string(first) != "first" {
				t.Fatalf("first chunk %q: %v", first, err)
			}
			close(sawFirst)
			rest, err := io.ReadAll(resp.Body)
			if err == nil {
				t.Fatalf("body read as complete (rest %q): want an error", rest)
			}
			b := dialRaw(t, s)
			b.send(getReq("/2"))
			b.expectOK("/2")
			got := checkUpstreamGot(t, up, "GET /1", "GET /2")
			if got[1].conn == got[0].conn {
				t.Error("the connection that sent a malformed chunk carried the next request")
			}
		})
	}
}

// TestResponseFramingExactFromHTTP2 (finding 1, HTTP/2 clients): requests that came
// over h2c to an HTTP/1.1 endpoint use the same pool; an upstream sending more than
// its response's framing allows loses its connection there too, and the next
// request (another stream, or another client connection) gets its own answer.
func TestResponseFramingExactFromHTTP2(t *testing.T) {
	for _, tc := range []struct {
		name, method, first string
		wantCode            int
	}{
		{"body on 204", "GET", "HTTP/1.1 204 No Content\r\nContent-Length: 5\r\n\r\nhello", 204},
		{"body on HEAD", "HEAD", "HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\nhello", 200},
		{"more than Content-Length", "GET", "HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nokHTTP/1.1 200 OK\r\nContent-Length: 9\r\n\r\nsmuggled!", 200},
		{"Transfer-Encoding on 204", "GET", "HTTP/1.1 204 No Content\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n", 204},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s, up := scriptedSidecar(t, sidecarOpts{}, func(n int, _ net.Conn, r *http.Request) string {
				if n == 0 {
					return tc.first
				}
				return okFor(r)
			})
			for i, c := range []*http.Client{h2cClient(t), h2cClient(t)} {
				if i == 0 {
					resp, _ := do(t, c, tc.method, "http://"+s.Addr.String()+"/1", "svc", "")
					if resp.StatusCode != tc.wantCode {
						t.Fatalf("first response %d, want %d", resp.StatusCode, tc.wantCode)
					}
				}
				uri := "/" + strconv.Itoa(i+2)
				resp, body := do(t, c, "GET", "http://"+s.Addr.String()+uri, "svc", "")
				if resp.StatusCode != 200 || body != "resp "+uri {
					t.Fatalf("%s: %d %q, want the upstream's answer to it", uri, resp.StatusCode, body)
				}
			}
			got := checkUpstreamGot(t, up, tc.method+" /1", "GET /2", "GET /3")
			if got[1].conn == got[0].conn {
				t.Error("the connection with extra bytes carried the next request")
			}
		})
	}
}

// TestTimeoutAfterRequestBody: an upstream that took the request body and never
// answers is a 504 at the route timeout (not a 503 blaming a reset), and another
// client connection is served after it.
func TestTimeoutAfterRequestBody(t *testing.T) {
	hang := make(chan struct{})
	up := startScripted(t, func(n int, _ net.Conn, r *http.Request) string {
		if n == 0 {
			<-hang
			return closeAfter
		}
		return okFor(r)
	})
	t.Cleanup(func() { close(hang) }) // runs before the upstream's cleanup waits for it
	ln := listen(t)
	s := startSidecar(t, ln, oneRoute(addrOf(ln), dt.PrefixRoute("/", "backend", 100*time.Millisecond),
		map[string][]netip.AddrPort{"backend": {up.addr}}), sidecarOpts{})
	a := dialRaw(t, s)
	a.send("POST /slow HTTP/1.1\r\nHost: svc\r\nContent-Length: 4\r\n\r\nbody")
	if resp, body := a.read("POST"); resp.StatusCode != http.StatusGatewayTimeout {
		t.Fatalf("got %d %q, want 504", resp.StatusCode, body)
	}
	b := dialRaw(t, s)
	b.send(getReq("/next"))
	b.expectOK("/next")
	got := checkUpstreamGot(t, up, "POST /slow", "GET /next")
	if got[0].body != "body" {
		t.Errorf("upstream got body %q", got[0].body)
	}
}
