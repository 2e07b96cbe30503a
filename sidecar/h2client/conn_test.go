package h2client_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"go.uber.org/goleak"
	"golang.org/x/net/http2"
	"google.golang.org/grpc"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/protobuf/proto"

	"github.com/weft-mesh/weft/sidecar/h2client"
	"github.com/weft-mesh/weft/tools/testkit"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// h2cServer is net/http's server speaking prior-knowledge HTTP/2.
func h2cServer(t testing.TB, h http.Handler, maxStreams int) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var p http.Protocols
	p.SetUnencryptedHTTP2(true)
	srv := &http.Server{Protocols: &p, Handler: h, HTTP2: &http.HTTP2Config{MaxConcurrentStreams: maxStreams}}
	go srv.Serve(ln)
	t.Cleanup(func() { srv.Close() })
	return ln.Addr().String()
}

func dial(t testing.TB, addr string, cfg h2client.Config) *h2client.Conn {
	t.Helper()
	nc, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	c, err := h2client.New(nc, cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

func request(t *testing.T, ctx context.Context, method, addr, path string, body io.Reader) *http.Request {
	t.Helper()
	r, err := http.NewRequestWithContext(ctx, method, "http://"+addr+path, body)
	if err != nil {
		t.Fatal(err)
	}
	return r
}

// echo answers with what it was sent: method, path, the request's x-* fields,
// its body, its trailers as response trailers; /big/N writes N bytes; /status/N
// answers N.
func echo(w http.ResponseWriter, r *http.Request) {
	var n, code int
	if _, err := fmt.Sscanf(r.URL.Path, "/big/%d", &n); err == nil {
		w.Header().Set("Content-Length", fmt.Sprint(n))
		chunk := bytes.Repeat([]byte("x"), 32<<10)
		for n > 0 {
			m := min(n, len(chunk))
			if _, err := w.Write(chunk[:m]); err != nil {
				return
			}
			n -= m
		}
		return
	}
	if _, err := fmt.Sscanf(r.URL.Path, "/status/%d", &code); err == nil {
		if code == 103 {
			w.Header().Set("Link", "</a.css>")
			w.WriteHeader(103)
			code = 200
		}
		w.WriteHeader(code)
		return
	}
	b, err := io.ReadAll(r.Body)
	if err != nil {
		http.Error(w, err.Error(), 500)
		return
	}
	w.Header().Set("X-Method", r.Method)
	w.Header().Set("X-Path", r.URL.RequestURI())
	w.Header().Set("X-Len", fmt.Sprint(r.ContentLength))
	w.Header().Set("X-Ua", r.Header.Get("User-Agent"))
	w.Header().Set("X-Cookie", r.Header.Get("Cookie"))
	for k := range r.Trailer {
		w.Header().Add("Trailer", "Echo-"+k)
	}
	w.Write(b)
	for k, v := range r.Trailer {
		w.Header().Set("Echo-"+k, strings.Join(v, ","))
	}
}

// chunks is a request body of unknown length.
type chunks struct{ parts []string }

func (c *chunks) Read(p []byte) (int, error) {
	if len(c.parts) == 0 {
		return 0, io.EOF
	}
	n := copy(p, c.parts[0])
	c.parts[0] = c.parts[0][n:]
	if c.parts[0] == "" {
		c.parts = c.parts[1:]
	}
	return n, nil
}

func TestRoundTripNetHTTP(t *testing.T) {
	addr := h2cServer(t, http.HandlerFunc(echo), 0)
	c := dial(t, addr, h2client.Config{StreamWindow: h2client.MinWindow})
	ctx := context.Background()
	bigBody := strings.Repeat("b", 3<<20) // over the server's 1 MiB windows
	for _, tc := range []struct {
		name     string
		req      func() *http.Request
		status   int
		body     string
		bodyLen  int
		header   map[string]string
		trailers map[string]string
	}{
		{name: "GET", req: func() *http.Request { return request(t, ctx, "GET", addr, "/a?b=c", nil) },
			status: 200, header: map[string]string{"X-Method": "GET", "X-Path": "/a?b=c", "X-Len": "0", "X-Ua": ""}},
		{name: "HEAD", req: func() *http.Request { return request(t, ctx, "HEAD", addr, "/h", nil) }, status: 200},
		{name: "POST known length", req: func() *http.Request { return request(t, ctx, "POST", addr, "/p", strings.NewReader("hello")) },
			status: 200, body: "hello", header: map[string]string{"X-Len": "5"}},
		{name: "POST unknown length", req: func() *http.Request {
			r := request(t, ctx, "POST", addr, "/p", &chunks{parts: []string{"one ", "two ", "three"}})
			r.ContentLength = -1
			return r
		}, status: 200, body: "one two three", header: map[string]string{"X-Len": "-1"}},
		{name: "request body past the windows", req: func() *http.Request { return request(t, ctx, "PUT", addr, "/p", strings.NewReader(bigBody)) },
			status: 200, body: bigBody},
		{name: "response past the receive window", req: func() *http.Request { return request(t, ctx, "GET", addr, "/big/3000000", nil) },
			status: 200, bodyLen: 3000000},
		{name: "request trailers", req: func() *http.Request {
			r := request(t, ctx, "POST", addr, "/t", &chunks{parts: []string{"abc"}})
			r.ContentLength = -1
			r.Trailer = http.Header{"Grpc-Status": {"0"}, "X-T": {"v"}}
			return r
		}, status: 200, body: "abc", trailers: map[string]string{"Echo-Grpc-Status": "0", "Echo-X-T": "v"}},
		{name: "cookies split and joined", req: func() *http.Request {
			r := request(t, ctx, "GET", addr, "/c", nil)
			r.Header.Set("Cookie", "a=1; b=2;  c=3")
			return r
		}, status: 200, header: map[string]string{"X-Cookie": "a=1; b=2; c=3"}},
		{name: "user agent passed", req: func() *http.Request {
			r := request(t, ctx, "GET", addr, "/u", nil)
			r.Header.Set("User-Agent", "curl/8")
			return r
		}, status: 200, header: map[string]string{"X-Ua": "curl/8"}},
		{name: "204", req: func() *http.Request { return request(t, ctx, "GET", addr, "/status/204", nil) }, status: 204},
		{name: "103 then 200", req: func() *http.Request { return request(t, ctx, "GET", addr, "/status/103", nil) }, status: 200},
		{name: "503", req: func() *http.Request { return request(t, ctx, "GET", addr, "/status/503", nil) }, status: 503},
	} {
		t.Run(tc.name, func(t *testing.T) {
			resp, err := c.RoundTrip(tc.req())
			if err != nil {
				t.Fatal(err)
			}
			b, err := io.ReadAll(resp.Body)
			resp.Body.Close()
			if err != nil {
				t.Fatal(err)
			}
			if resp.StatusCode != tc.status || resp.Proto != "HTTP/2.0" {
				t.Fatalf("status %d %s, want %d HTTP/2.0", resp.StatusCode, resp.Proto, tc.status)
			}
			if tc.bodyLen > 0 && len(b) != tc.bodyLen || tc.bodyLen == 0 && string(b) != tc.body {
				t.Fatalf("body %d bytes %.40q, want %d %.40q", len(b), b, tc.bodyLen, tc.body)
			}
			for k, v := range tc.header {
				if got := resp.Header.Get(k); got != v {
					t.Errorf("header %s = %q, want %q", k, got, v)
				}
			}
			for k, v := range tc.trailers {
				if got := resp.Trailer.Get(k); got != v {
					t.Errorf("trailer %s = %q, want %q (trailers %v)", k, got, v, resp.Trailer)
				}
			}
		})
	}
	if n := c.InFlight(); n != 0 {
		t.Fatalf("InFlight %d after every response was read", n)
	}
}

// TestMaxConcurrentStreams: reservations stop at the server's
// SETTINGS_MAX_CONCURRENT_STREAMS, and a released or finished one is free
// again; a RoundTrip without a reservation waits for a slot.
func TestMaxConcurrentStreams(t *testing.T) {
	release := make(chan struct{})
	addr := h2cServer(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/hold" {
			<-release
		}
	}), 2)
	c := dial(t, addr, h2client.Config{})
	// Before the server's SETTINGS: 100 assumed. A first request makes sure they arrived.
	resp, err := c.RoundTrip(request(t, context.Background(), "GET", addr, "/", nil))
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	for i := range 2 {
		if err := c.Reserve(); err != nil {
			t.Fatalf("reserve %d of 2: %v", i+1, err)
		}
	}
	if err := c.Reserve(); err == nil {
		t.Fatal("a third reservation past MAX_CONCURRENT_STREAMS 2 succeeded")
	}
	c.Release()
	if c.Available() != 1 || c.InFlight() != 1 {
		t.Fatalf("after a release: available %d in flight %d, want 1 1", c.Available(), c.InFlight())
	}
	// The one reservation left is taken by a held request; one more waits.
	held := make(chan error, 2)
	for range 2 {
		go func() {
			resp, err := c.RoundTrip(request(t, context.Background(), "GET", addr, "/hold", nil))
			if err == nil {
				_, err = io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
			}
			held <- err
		}()
	}
	testkit.Eventually(t, 5*time.Second, "two streams open", func() bool { return c.InFlight() == 2 && c.Available() == 0 })
	close(release)
	for range 2 {
		if err := <-held; err != nil {
			t.Fatal(err)
		}
	}
	testkit.Eventually(t, 5*time.Second, "every slot free", func() bool { return c.InFlight() == 0 })
}

// TestGoAwayDrains: a server shutting down lets the stream in flight finish;
// no new one is taken, and the connection closes after it.
func TestGoAwayDrains(t *testing.T) {
	arrived, release := make(chan struct{}), make(chan struct{})
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var p http.Protocols
	p.SetUnencryptedHTTP2(true)
	srv := &http.Server{Protocols: &p, Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		close(arrived)
		<-release
		io.WriteString(w, "done")
	})}
	go srv.Serve(ln)
	defer srv.Close()
	c := dial(t, ln.Addr().String(), h2client.Config{})
	var hooks atomic.Int64
	c.SetStateHook(func() { hooks.Add(1) })
	got := make(chan string, 1)
	go func() {
		resp, err := c.RoundTrip(request(t, context.Background(), "GET", ln.Addr().String(), "/", nil))
		if err != nil {
			got <- err.Error()
			return
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		got <- string(b)
	}()
	<-arrived
	shut := make(chan error, 1)
	go func() { shut <- srv.Shutdown(context.Background()) }()
	testkit.Eventually(t, 5*time.Second, "GOAWAY read", func() bool { return c.Reserve() != nil })
	close(release)
	if s := <-got; s != "done" {
		t.Fatalf("the stream in flight at GOAWAY got %q, want done", s)
	}
	testkit.Eventually(t, 5*time.Second, "connection closed after its last stream", func() bool { return c.Err() != nil })
	if err := <-shut; err != nil {
		t.Fatal(err)
	}
	if hooks.Load() < 2 {
		t.Fatalf("state hook called %d times, want the initial call and more", hooks.Load())
	}
	if _, err := c.RoundTrip(request(t, context.Background(), "GET", ln.Addr().String(), "/", nil)); !errors.Is(err, h2client.ErrUnusable) {
		t.Fatalf("RoundTrip after the close: %v, want ErrUnusable", err)
	}
}

// TestCancelResetsStream: a cancelled request resets its stream (the
// server's handler sees its context end) and frees its slot; the connection
// goes on.
func TestCancelResetsStream(t *testing.T) {
	gone := make(chan struct{})
	addr := h2cServer(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/hang" {
			w.WriteHeader(200)
			w.(http.Flusher).Flush()
			<-r.Context().Done()
			close(gone)
		}
	}), 0)
	c := dial(t, addr, h2client.Config{})
	ctx, cancel := context.WithCancel(context.Background())
	resp, err := c.RoundTrip(request(t, ctx, "GET", addr, "/hang", nil))
	if err != nil {
		t.Fatal(err)
	}
	readErr := make(chan error, 1)
	go func() { _, err := io.ReadAll(resp.Body); readErr <- err }()
	cancel()
	if err := <-readErr; !errors.Is(err, context.Canceled) {
		t.Fatalf("body read after cancel: %v, want context.Canceled", err)
	}
	resp.Body.Close()
	select {
	case <-gone:
	case <-time.After(5 * time.Second):
		t.Fatal("the server's handler never saw the reset")
	}
	if n := c.InFlight(); n != 0 {
		t.Fatalf("InFlight %d after the reset", n)
	}
	resp, err = c.RoundTrip(request(t, context.Background(), "GET", addr, "/", nil))
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
}

// TestEarlyClose: closing a body not read to its end resets the stream and
// gives its buffered bytes' connection credit back: many such requests on
// one connection do not exhaust its window.
func TestEarlyClose(t *testing.T) {
	addr := h2cServer(t, http.HandlerFunc(echo), 0)
	c := dial(t, addr, h2client.Config{ConnWindow: h2client.MinWindow, StreamWindow: h2client.MinWindow})
	for i := range 20 {
		resp, err := c.RoundTrip(request(t, context.Background(), "GET", addr, "/big/1000000", nil))
		if err != nil {
			t.Fatalf("request %d: %v", i, err)
		}
		var one [1]byte
		if _, err := io.ReadFull(resp.Body, one[:]); err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
	}
	resp, err := c.RoundTrip(request(t, context.Background(), "GET", addr, "/big/200000", nil))
	if err != nil {
		t.Fatal(err)
	}
	n, err := io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	if err != nil || n != 200000 {
		t.Fatalf("after 20 early closes: %d bytes, %v", n, err)
	}
}

// silentServer answers the HTTP/2 preface with SETTINGS and then reads and
// never writes again: a peer that vanished.
func silentServer(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	t.Cleanup(func() { ln.Close(); <-done })
	go func() {
		defer close(done)
		nc, err := ln.Accept()
		if err != nil {
			return
		}
		defer nc.Close()
		fr := http2.NewFramer(nc, nc)
		fr.WriteSettings()
		io.Copy(io.Discard, nc)
	}()
	return ln.Addr().String()
}

func TestPingTimeoutClosesSilentConn(t *testing.T) {
	c := dial(t, silentServer(t), h2client.Config{PingTimeout: 20 * time.Millisecond})
	testkit.Eventually(t, 5*time.Second, "a silent connection closed", func() bool { return c.Err() != nil })
	if !strings.Contains(c.Err().Error(), "PING") {
		t.Fatalf("Err %v, want the lost PING", c.Err())
	}
}

func TestIdleTimeout(t *testing.T) {
	addr := h2cServer(t, http.HandlerFunc(echo), 0)
	c := dial(t, addr, h2client.Config{IdleTimeout: 20 * time.Millisecond})
	resp, err := c.RoundTrip(request(t, context.Background(), "GET", addr, "/", nil))
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	testkit.Eventually(t, 5*time.Second, "an idle connection closed", func() bool { return c.Err() != nil })
}

// TestGRPCHealth is a unary gRPC call through the client to grpc-go's server:
// the message in DATA, grpc-status in the trailers.
func TestGRPCHealth(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	gs := grpc.NewServer()
	healthpb.RegisterHealthServer(gs, health.NewServer())
	go gs.Serve(ln)
	defer gs.Stop()
	addr := ln.Addr().String()
	c := dial(t, addr, h2client.Config{})
	for _, tc := range []struct{ service, status string }{{"", "0"}, {"nope", "5"}} {
		msg, _ := proto.Marshal(&healthpb.HealthCheckRequest{Service: tc.service})
		frame := append([]byte{0, 0, 0, 0, byte(len(msg))}, msg...)
		r := request(t, context.Background(), "POST", addr, "/grpc.health.v1.Health/Check", bytes.NewReader(frame))
		r.Header.Set("Content-Type", "application/grpc")
		r.Header.Set("Te", "trailers")
		resp, err := c.RoundTrip(r)
		if err != nil {
			t.Fatal(err)
		}
		b, err := io.ReadAll(resp.Body)
		resp.Body.Close()
		if err != nil {
			t.Fatal(err)
		}
		gsHdr := resp.Header.Get("Grpc-Status") // trailers-only responses carry it here
		if gsHdr == "" {
			gsHdr = resp.Trailer.Get("Grpc-Status")
		}
		if resp.StatusCode != 200 || gsHdr != tc.status {
			t.Fatalf("service %q: status %d grpc-status %q (trailers %v), want 200 %s", tc.service, resp.StatusCode, gsHdr, resp.Trailer, tc.status)
		}
		if tc.status == "0" {
			var out healthpb.HealthCheckResponse
			if len(b) < 5 || proto.Unmarshal(b[5:], &out) != nil || out.Status != healthpb.HealthCheckResponse_SERVING {
				t.Fatalf("response message %x", b)
			}
		}
	}
}

// TestConfigBounds: each bound accepted at its edge, refused one past it.
func TestConfigBounds(t *testing.T) {
	for _, tc := range []struct {
		name string
		cfg  h2client.Config
		ok   bool
	}{
		{"defaults", h2client.Config{}, true},
		{"frame min", h2client.Config{MaxReadFrameSize: h2client.MinMaxReadFrameSize}, true},
		{"frame under min", h2client.Config{MaxReadFrameSize: h2client.MinMaxReadFrameSize - 1}, false},
		{"frame max", h2client.Config{MaxReadFrameSize: h2client.MaxMaxReadFrameSize}, true},
		{"frame over max", h2client.Config{MaxReadFrameSize: h2client.MaxMaxReadFrameSize + 1}, false},
		{"header list min", h2client.Config{MaxHeaderListSize: h2client.MinMaxHeaderListSize}, true},
		{"header list under min", h2client.Config{MaxHeaderListSize: h2client.MinMaxHeaderListSize - 1}, false},
		{"header list max", h2client.Config{MaxHeaderListSize: h2client.MaxMaxHeaderListSize}, true},
		{"header list over max", h2client.Config{MaxHeaderListSize: h2client.MaxMaxHeaderListSize + 1}, false},
		{"stream window min", h2client.Config{StreamWindow: h2client.MinWindow}, true},
		{"stream window under min", h2client.Config{StreamWindow: h2client.MinWindow - 1}, false},
		{"conn window max", h2client.Config{ConnWindow: h2client.MaxWindow}, true},
		{"conn window over max", h2client.Config{ConnWindow: h2client.MaxWindow + 1}, false},
		{"negative idle", h2client.Config{IdleTimeout: -1}, false},
		{"negative ping", h2client.Config{PingTimeout: -1}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			a, b := net.Pipe()
			defer a.Close()
			defer b.Close()
			go io.Copy(io.Discard, b)
			c, err := h2client.New(a, tc.cfg)
			if (err == nil) != tc.ok {
				t.Fatalf("New: %v, want ok %v", err, tc.ok)
			}
			if c != nil {
				c.Close()
			}
		})
	}
}

// TestPeerHeaderListBound: a request over the server's
// SETTINGS_MAX_HEADER_LIST_SIZE is refused before anything is sent.
func TestPeerHeaderListBound(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var p http.Protocols
	p.SetUnencryptedHTTP2(true)
	srv := &http.Server{Protocols: &p, MaxHeaderBytes: 1 << 10, Handler: http.HandlerFunc(echo)}
	go srv.Serve(ln)
	defer srv.Close()
	addr := ln.Addr().String()
	c := dial(t, addr, h2client.Config{})
	resp, err := c.RoundTrip(request(t, context.Background(), "GET", addr, "/", nil)) // the SETTINGS are read by now
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	// net/http advertises MaxHeaderBytes + 32 per field of ten: 1344.
	for _, tc := range []struct {
		n  int
		ok bool
	}{{1000, true}, {1400, false}} {
		r := request(t, context.Background(), "GET", addr, "/", nil)
		r.Header.Set("X-Big", strings.Repeat("v", tc.n))
		resp, err := c.RoundTrip(r)
		if (err == nil) != tc.ok {
			t.Fatalf("%d-byte field: %v, want ok %v", tc.n, err, tc.ok)
		}
		if err == nil {
			resp.Body.Close()
		}
	}
	if c.Err() != nil || c.InFlight() != 0 {
		t.Fatalf("after a refused request: Err %v InFlight %d", c.Err(), c.InFlight())
	}
}

// endlessBody is a request body that never ends; it reports its Close.
type endlessBody struct{ closed chan struct{} }

func (b *endlessBody) Read(p []byte) (int, error) {
	select {
	case <-b.closed:
		return 0, errors.New("read after close")
	default:
	}
	for i := range p {
		p[i] = 'e'
	}
	return len(p), nil
}

func (b *endlessBody) Close() error {
	select {
	case <-b.closed:
	default:
		close(b.closed)
	}
	return nil
}

// TestEarlyAnswerStopsBody: a server answering 403 without reading an endless
// request body ends the exchange: the response arrives, the body is closed
// (its writer stops), and the connection goes on.
func TestEarlyAnswerStopsBody(t *testing.T) {
	addr := h2cServer(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/deny" {
			http.Error(w, "no", http.StatusForbidden)
		}
	}), 0)
	c := dial(t, addr, h2client.Config{})
	body := &endlessBody{closed: make(chan struct{})}
	r := request(t, context.Background(), "POST", addr, "/deny", body)
	r.ContentLength = -1
	resp, err := c.RoundTrip(r)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusForbidden || strings.TrimSpace(string(b)) != "no" {
		t.Fatalf("got %d %q, want 403 no", resp.StatusCode, b)
	}
	select {
	case <-body.closed:
	case <-time.After(5 * time.Second):
		t.Fatal("the request body was not closed after the early answer")
	}
	testkit.Eventually(t, 5*time.Second, "the stream's slot free", func() bool { return c.InFlight() == 0 })
	resp, err = c.RoundTrip(request(t, context.Background(), "GET", addr, "/", nil))
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
}
