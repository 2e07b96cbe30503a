package httpproxy_test

import (
	"bufio"
	"bytes"
	"errors"
	"io"
	"net"
	"net/http"
	"net/netip"
	"os"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	dt "github.com/weft-mesh/weft/sidecar/dataplane/dataplanetest"
	"github.com/weft-mesh/weft/sidecar/httpproxy"
)

// The raw TCP peers of the HTTP/1.1 framing tests (findings 1-7): a scripted
// upstream that writes exact bytes and records exact bytes, and a downstream
// client that does the same; net/http's parsers read what they receive.

// upReq is one request as a scripted upstream read it.
type upReq struct {
	conn   int64 // which upstream connection (1-based, in the order their handlers start)
	method string
	uri    string
	header http.Header
	body   string
}

// scripted is a raw TCP upstream. It records every byte each connection received
// and the requests it read.
type scripted struct {
	addr netip.AddrPort
	mu   sync.Mutex
	raw  []*bytes.Buffer // by connection id - 1
	got  []upReq
}

// closeAfter, ending an answer, makes the upstream close the connection after it.
const closeAfter = "\x00close"

// startScripted is an upstream that reads requests with net/http's parser and
// writes, for the n-th request it read (0-based, across connections), exactly the
// bytes answer returns; a nil answer is okFor.
func startScripted(t *testing.T, answer func(n int, c net.Conn, r *http.Request) string) *scripted {
	t.Helper()
	return serveScripted(t, func(up *scripted, id int64, c net.Conn, br *bufio.Reader) {
		for {
			r, err := http.ReadRequest(br)
			if err != nil {
				return
			}
			b, err := io.ReadAll(r.Body)
			if err != nil {
				return
			}
			n := up.record(id, r, string(b))
			out := okFor(r)
			if answer != nil {
				out = answer(n, c, r)
			}
			closeIt := strings.HasSuffix(out, closeAfter)
			if _, err := io.WriteString(c, strings.TrimSuffix(out, closeAfter)); err != nil || closeIt {
				return
			}
		}
	})
}

// serveScripted is an upstream whose connections serve handles, each with its id
// and a reader of what it receives (recorded for bytes and connBytes).
func serveScripted(t *testing.T, serve func(up *scripted, id int64, c net.Conn, br *bufio.Reader)) *scripted {
	t.Helper()
	up := &scripted{}
	up.addr = dt.ServeTCP(t, func(c net.Conn) {
		up.mu.Lock()
		b := &bytes.Buffer{}
		up.raw = append(up.raw, b)
		id := int64(len(up.raw))
		up.mu.Unlock()
		serve(up, id, c, bufio.NewReader(teeReader{r: c, mu: &up.mu, b: b}))
	})
	return up
}

// teeReader copies what it reads into b, under mu.
type teeReader struct {
	r  io.Reader
	mu *sync.Mutex
	b  *bytes.Buffer
}

func (t teeReader) Read(p []byte) (int, error) {
	n, err := t.r.Read(p)
	t.mu.Lock()
	t.b.Write(p[:n])
	t.mu.Unlock()
	return n, err
}

// record adds a request connection conn read and returns its index.
func (s *scripted) record(conn int64, r *http.Request, body string) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.got = append(s.got, upReq{conn: conn, method: r.Method, uri: r.RequestURI, header: r.Header, body: body})
	return len(s.got) - 1
}

func (s *scripted) requests() []upReq {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]upReq(nil), s.got...)
}

// bytes is everything the upstream received, all connections.
func (s *scripted) bytes() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	var b strings.Builder
	for _, r := range s.raw {
		b.Write(r.Bytes())
	}
	return b.String()
}

// connBytes is what upstream connection id (upReq.conn) received.
func (s *scripted) connBytes(id int64) string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.raw[id-1].String()
}

// uris lists "METHOD uri" of the requests the upstream parsed.
func (s *scripted) uris() string {
	var l []string
	for _, r := range s.requests() {
		l = append(l, r.method+" "+r.uri)
	}
	return strings.Join(l, ",")
}

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

// okFor is a well-framed answer naming the request, so a shifted response shows.
func okFor(r *http.Request) string {
	b := "resp " + r.RequestURI
	return "HTTP/1.1 200 OK\r\nContent-Length: " + strconv.Itoa(len(b)) + "\r\n\r\n" + b
}

// simpleSidecar is one sidecar routing every host to up.
func simpleSidecar(t *testing.T, up netip.AddrPort) *sidecar {
	ln := listen(t)
	return startSidecar(t, ln, dt.Simple("outbound", addrOf(ln), false, up), sidecarOpts{})
}

// scriptedSidecar is a sidecar routing everything to one scripted upstream.
func scriptedSidecar(t *testing.T, o sidecarOpts, answer func(n int, c net.Conn, r *http.Request) string) (*sidecar, *scripted) {
	t.Helper()
	up := startScripted(t, answer)
	ln := listen(t)
	return startSidecar(t, ln, dt.Simple("outbound", addrOf(ln), false, up.addr), o), up
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

func getReq(uri string) string { return "GET " + uri + " HTTP/1.1\r\nHost: svc\r\n\r\n" }

// readLocal reads a response the sidecar must have generated itself: code, the
// x-weft-local value, Connection: close, then the connection closed.
func (rc *rawClient) readLocal(code int, local string) string {
	rc.t.Helper()
	resp, body := rc.read("GET")
	if resp.StatusCode != code || resp.Header.Get(httpproxy.LocalHeader) != local {
		rc.t.Fatalf("got %d %s=%q %q, want %d from %q", resp.StatusCode, httpproxy.LocalHeader, resp.Header.Get(httpproxy.LocalHeader), body, code, local)
	}
	if !resp.Close {
		rc.t.Errorf("%d answer without Connection: close", code)
	}
	rc.expectClosed()
	return body
}

// expectClosed checks the sidecar closed the client connection: nothing more
// arrives (in particular no answer to a request pipelined after a rejected one),
// and the end is a close, not the connection's deadline.
func (rc *rawClient) expectClosed() {
	rc.t.Helper()
	b, err := rc.br.ReadByte()
	if err == nil {
		rest, _ := rc.br.Peek(rc.br.Buffered())
		rc.t.Fatalf("client connection still open, sent %q", append([]byte{b}, rest...))
	}
	if errors.Is(err, os.ErrDeadlineExceeded) {
		rc.t.Fatalf("client connection not closed within its deadline")
	}
}
