package httpproxy_test

import (
	"bufio"
	"io"
	"net"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"
	"golang.org/x/net/http2"
	"golang.org/x/net/http2/hpack"

	dt "github.com/weft-mesh/weft/sidecar/dataplane/dataplanetest"
	"github.com/weft-mesh/weft/sidecar/httpproxy"
	"github.com/weft-mesh/weft/tools/testkit"
)

// Every bound of Config: accepted at its limits, refused one past them.
func TestConfigBounds(t *testing.T) {
	pool := validationPool(t)
	for _, tc := range []struct {
		name   string
		set    func(*httpproxy.Config, int)
		lo, hi int
	}{
		{"BufferSize", func(c *httpproxy.Config, v int) { c.BufferSize = v }, httpproxy.MinBufferSize, httpproxy.MaxBufferSize},
		{"MaxHeaderBytes", func(c *httpproxy.Config, v int) { c.MaxHeaderBytes = v }, httpproxy.MinMaxHeaderBytes, httpproxy.MaxMaxHeaderBytes},
		{"MaxHeaderFields", func(c *httpproxy.Config, v int) { c.MaxHeaderFields = v }, httpproxy.MinMaxHeaderFields, httpproxy.MaxMaxHeaderFields},
		{"MaxConcurrentStreams", func(c *httpproxy.Config, v int) { c.MaxConcurrentStreams = v }, 1, httpproxy.MaxMaxConcurrentStreams},
		{"H2StreamBuffer", func(c *httpproxy.Config, v int) { c.H2StreamBuffer = v }, httpproxy.MinH2Buffer, httpproxy.MaxH2Buffer},
		{"H2ConnBuffer", func(c *httpproxy.Config, v int) { c.H2ConnBuffer = v }, httpproxy.MinH2Buffer, httpproxy.MaxH2Buffer},
		{"H2MaxFrameSize", func(c *httpproxy.Config, v int) { c.H2MaxFrameSize = v }, httpproxy.MinH2MaxFrameSize, httpproxy.MaxH2MaxFrameSize},
	} {
		for _, v := range []struct {
			v  int
			ok bool
		}{{tc.lo, true}, {tc.hi, true}, {tc.lo - 1, tc.lo-1 == 0}, {tc.hi + 1, false}} {
			cfg := httpproxy.Config{Logger: hclog.NewNullLogger(), Pool: pool}
			tc.set(&cfg, v.v)
			p, err := httpproxy.New(cfg)
			if (err == nil) != v.ok {
				t.Errorf("%s %d: err %v, want ok=%v", tc.name, v.v, err, v.ok)
			}
			if err == nil {
				p.Close()
			} else if !strings.Contains(err.Error(), tc.name) {
				t.Errorf("%s %d: error %q does not name the field", tc.name, v.v, err)
			}
		}
	}
}

// MaxHeaderBytes counts the request line and header lines without their CRLFs;
// MaxHeaderFields counts header lines. At the bound: answered; one past: 431.
func TestHeaderBoundsAtBoundAndOnePast(t *testing.T) {
	const maxBytes, maxFields = 2048, 10
	a := startApp(t, echo)
	ln := listen(t)
	s := startSidecar(t, ln, dt.Simple("outbound", addrOf(ln), false, a.ap()), sidecarOpts{proxy: func(c *httpproxy.Config) {
		c.MaxHeaderBytes, c.MaxHeaderFields = maxBytes, maxFields
	}})
	addr := s.Addr.String()
	bytesReq := func(total int) string {
		head := "GET / HTTP/1.1" + "Host: svc" + "X: " // counted bytes so far
		return "GET / HTTP/1.1\r\nHost: svc\r\nX: " + strings.Repeat("a", total-len(head)) + "\r\n\r\n"
	}
	fieldsReq := func(n int) string {
		var b strings.Builder
		b.WriteString("GET / HTTP/1.1\r\nHost: svc\r\n")
		for i := 1; i < n; i++ {
			b.WriteString("X-" + strconv.Itoa(i) + ": v\r\n")
		}
		return b.String() + "\r\n"
	}
	for _, tc := range []struct{ name, req, want string }{
		{"bytes at bound", bytesReq(maxBytes), "HTTP/1.1 200 OK"},
		{"bytes one past", bytesReq(maxBytes + 1), "HTTP/1.1 431 Request Header Fields Too Large"},
		{"fields at bound", fieldsReq(maxFields), "HTTP/1.1 200 OK"},
		{"fields one past", fieldsReq(maxFields + 1), "HTTP/1.1 431 Request Header Fields Too Large"},
	} {
		if got := dt.StatusLine(t, addr, tc.req); got != tc.want {
			t.Errorf("%s: %q, want %q", tc.name, got, tc.want)
		}
	}
}

// h2Conn is a raw HTTP/2 client connection past the preface, with the server's
// first SETTINGS read.
func h2Conn(t *testing.T, addr string) (net.Conn, *http2.Framer, map[http2.SettingID]uint32) {
	t.Helper()
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	_ = c.SetDeadline(time.Now().Add(5 * time.Second))
	io.WriteString(c, http2.ClientPreface)
	fr := http2.NewFramer(c, c)
	fr.SetMaxReadFrameSize(1 << 20)
	if err := fr.WriteSettings(); err != nil {
		t.Fatal(err)
	}
	f, err := fr.ReadFrame()
	if err != nil {
		t.Fatal(err)
	}
	sf, ok := f.(*http2.SettingsFrame)
	if !ok {
		t.Fatalf("first frame %v, want SETTINGS", f)
	}
	set := map[http2.SettingID]uint32{}
	sf.ForeachSetting(func(s http2.Setting) error { set[s.ID] = s.Val; return nil })
	return c, fr, set
}

func headersFor(t *testing.T, path string) []byte {
	t.Helper()
	var b strings.Builder
	enc := hpack.NewEncoder(&b)
	for _, f := range [][2]string{{":method", "GET"}, {":scheme", "http"}, {":authority", "svc"}, {":path", path}} {
		enc.WriteField(hpack.HeaderField{Name: f[0], Value: f[1]})
	}
	return []byte(b.String())
}

// The HTTP/2 bounds are what the server advertises; one stream past
// MaxConcurrentStreams is refused, a frame one byte past H2MaxFrameSize ends the
// connection with FRAME_SIZE_ERROR, one at the bound is accepted.
func TestHTTP2BoundsAtBoundAndOnePast(t *testing.T) {
	const streams, window, conn, frame = 3, 128 << 10, 256 << 10, 32 << 10
	a := startHoldApp(t)
	ln := listen(t)
	s := startSidecar(t, ln, dt.Simple("outbound", addrOf(ln), false, a.ap()), sidecarOpts{proxy: func(c *httpproxy.Config) {
		c.MaxConcurrentStreams, c.H2StreamBuffer, c.H2ConnBuffer, c.H2MaxFrameSize = streams, window, conn, frame
	}})
	defer close(a.release)
	_, fr, set := h2Conn(t, s.Addr.String())
	if set[http2.SettingMaxConcurrentStreams] != streams || set[http2.SettingInitialWindowSize] != window || set[http2.SettingMaxFrameSize] != frame {
		t.Fatalf("server SETTINGS %v, want streams %d, window %d, frame %d", set, streams, window, frame)
	}
	for i := range streams + 1 {
		id := uint32(2*i + 1)
		if err := fr.WriteHeaders(http2.HeadersFrameParam{StreamID: id, BlockFragment: headersFor(t, "/hold"), EndStream: true, EndHeaders: true}); err != nil {
			t.Fatal(err)
		}
	}
	// The one past the bound is reset (REFUSED_STREAM or PROTOCOL_ERROR, Go's
	// choice); the others are held at the app.
	var connWindow uint32
	for {
		f, err := fr.ReadFrame()
		if err != nil {
			t.Fatalf("waiting for the refusal: %v", err)
		}
		if wu, ok := f.(*http2.WindowUpdateFrame); ok && wu.StreamID == 0 {
			connWindow += wu.Increment
		}
		if rst, ok := f.(*http2.RSTStreamFrame); ok {
			if rst.StreamID != 2*streams+1 {
				t.Fatalf("stream %d reset (%v), want only stream %d", rst.StreamID, rst.ErrCode, 2*streams+1)
			}
			break
		}
	}
	if connWindow != conn-65535 {
		t.Errorf("connection window raised by %d, want %d (to H2ConnBuffer)", connWindow, conn-65535)
	}
	testkit.Eventually(t, 5*time.Second, "the bound's streams at the app", func() bool { return a.holding.Load() == streams })

	// Frame sizes, on a fresh connection, with a frame of an unknown type (which
	// a server must read and ignore): at the bound, then one past.
	_, fr2, _ := h2Conn(t, s.Addr.String())
	if err := fr2.WriteRawFrame(0xfa, 0, 0, make([]byte, frame)); err != nil {
		t.Fatal(err)
	}
	if err := fr2.WritePing(false, [8]byte{1}); err != nil {
		t.Fatal(err)
	}
	for {
		f, err := fr2.ReadFrame()
		if err != nil {
			t.Fatalf("after a frame at the bound: %v", err)
		}
		if p, ok := f.(*http2.PingFrame); ok && p.IsAck() {
			break // the frame at the bound was read and ignored
		}
		if g, ok := f.(*http2.GoAwayFrame); ok {
			t.Fatalf("GOAWAY %v after a frame at the bound", g.ErrCode)
		}
	}
	if err := fr2.WriteRawFrame(0xfa, 0, 0, make([]byte, frame+1)); err != nil {
		t.Fatal(err)
	}
	for {
		f, err := fr2.ReadFrame()
		if err != nil {
			t.Fatalf("after a frame one past the bound, no GOAWAY: %v", err)
		}
		if g, ok := f.(*http2.GoAwayFrame); ok {
			if g.ErrCode != http2.ErrCodeFrameSize {
				t.Fatalf("GOAWAY %v, want FRAME_SIZE_ERROR", g.ErrCode)
			}
			break
		}
	}
}

// ReadHeaderTimeout ends a connection whose header section has not arrived, and
// IdleTimeout one idle between requests: not before, and soon after.
func TestHTTP1TimeoutsAtBound(t *testing.T) {
	const hdr, idle = 300 * time.Millisecond, 500 * time.Millisecond
	a := startApp(t, echo)
	ln := listen(t)
	s := startSidecar(t, ln, dt.Simple("outbound", addrOf(ln), false, a.ap()), sidecarOpts{proxy: func(c *httpproxy.Config) {
		c.ReadHeaderTimeout, c.IdleTimeout = hdr, idle
	}})
	closedAfter := func(c net.Conn) time.Duration {
		start := time.Now()
		_ = c.SetReadDeadline(time.Now().Add(5 * time.Second))
		_, _ = io.Copy(io.Discard, c)
		return time.Since(start)
	}
	c, err := net.Dial("tcp", s.Addr.String())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	io.WriteString(c, "GET / HTTP/1.1\r\nHost: sv")
	if d := closedAfter(c); d < hdr-50*time.Millisecond || d > hdr+2*time.Second {
		t.Errorf("partial header: closed after %s, want about %s", d, hdr)
	}
	c2, err := net.Dial("tcp", s.Addr.String())
	if err != nil {
		t.Fatal(err)
	}
	defer c2.Close()
	io.WriteString(c2, "GET / HTTP/1.1\r\nHost: svc\r\n\r\n")
	br := bufio.NewReader(c2)
	resp, err := http.ReadResponse(br, nil)
	if err != nil || resp.StatusCode != 200 {
		t.Fatalf("request: %v %v", resp, err)
	}
	io.Copy(io.Discard, resp.Body)
	start := time.Now()
	_ = c2.SetReadDeadline(time.Now().Add(5 * time.Second))
	_, _ = io.Copy(io.Discard, br)
	if d := time.Since(start); d < idle-50*time.Millisecond || d > idle+2*time.Second {
		t.Errorf("idle connection closed after %s, want about %s", d, idle)
	}
}

// readUntil reads frames until match says stop; it fails on a read error.
func readUntil(t *testing.T, fr *http2.Framer, what string, match func(http2.Frame) bool) {
	t.Helper()
	for {
		f, err := fr.ReadFrame()
		if err != nil {
			t.Fatalf("waiting for %s: %v", what, err)
		}
		if match(f) {
			return
		}
	}
}

// Shutdown drains HTTP/2 connections (finding 8): GOAWAY first, the stream in
// flight finishes with its answer, then the connection is closed, and Serve
// returns without waiting out the drain timeout. A stream that does not finish is
// cut at the drain timeout.
func TestShutdownDrainsHTTP2(t *testing.T) {
	for _, tc := range []struct {
		name    string
		finish  bool
		drain   time.Duration
		atLeast time.Duration
	}{{"stream finishes", true, 10 * time.Second, 0}, {"stream cut at drain timeout", false, 300 * time.Millisecond, 300 * time.Millisecond}} {
		t.Run(tc.name, func(t *testing.T) {
			a := startHoldApp(t)
			ln := listen(t)
			s := startSidecar(t, ln, dt.Simple("outbound", addrOf(ln), false, a.ap()), sidecarOpts{drain: tc.drain})
			c, fr, _ := h2Conn(t, s.Addr.String())
			_ = c.SetDeadline(time.Now().Add(15 * time.Second))
			if err := fr.WriteHeaders(http2.HeadersFrameParam{StreamID: 1, BlockFragment: headersFor(t, "/hold"), EndStream: true, EndHeaders: true}); err != nil {
				t.Fatal(err)
			}
			testkit.Eventually(t, 5*time.Second, "the stream at the app", func() bool { return a.holding.Load() == 1 })
			start := time.Now()
			stopped := make(chan struct{})
			go func() { s.shutdown(); close(stopped) }()
			readUntil(t, fr, "GOAWAY", func(f http2.Frame) bool {
				g, ok := f.(*http2.GoAwayFrame)
				return ok && g.ErrCode == http2.ErrCodeNo
			})
			if tc.finish {
				close(a.release)
				var status string
				dec := hpack.NewDecoder(4096, func(f hpack.HeaderField) {
					if f.Name == ":status" {
						status = f.Value
					}
				})
				readUntil(t, fr, "the response", func(f http2.Frame) bool {
					if h, ok := f.(*http2.HeadersFrame); ok && h.StreamID == 1 {
						dec.Write(h.HeaderBlockFragment())
					}
					return f.Header().StreamID == 1 && f.Header().Flags.Has(http2.FlagDataEndStream)
				})
				if status != "200" {
					t.Fatalf("drained stream answered %q, want 200", status)
				}
			} else {
				defer close(a.release)
			}
			if _, err := io.Copy(io.Discard, c); err != nil {
				t.Fatalf("connection not closed after the drain: %v", err)
			}
			checkDrained(t, stopped, start, tc.atLeast)
		})
	}
}

// checkDrained waits for Serve to return (stopped closed) and wants the shutdown
// begun at start to have taken about atLeast.
func checkDrained(t *testing.T, stopped <-chan struct{}, start time.Time, atLeast time.Duration) {
	t.Helper()
	select {
	case <-stopped:
	case <-time.After(10 * time.Second):
		t.Fatal("Serve did not return after the drain")
	}
	if took := time.Since(start); took < atLeast || took > atLeast+3*time.Second {
		t.Errorf("shutdown took %s, want about %s", took, atLeast)
	}
}

// Shutdown drains HTTP/1.1 connections: one waiting for its next request closes at
// once; one with a request in flight gets the whole answer, then is closed; Serve
// returns then, not at the drain timeout. A request that never ends is cut at it.
func TestShutdownDrainsHTTP1(t *testing.T) {
	for _, tc := range []struct {
		name    string
		finish  bool
		drain   time.Duration
		atLeast time.Duration
	}{{"request finishes", true, 10 * time.Second, 0}, {"request cut at drain timeout", false, 300 * time.Millisecond, 300 * time.Millisecond}} {
		t.Run(tc.name, func(t *testing.T) {
			a := startHoldApp(t)
			ln := listen(t)
			s := startSidecar(t, ln, dt.Simple("outbound", addrOf(ln), false, a.ap()), sidecarOpts{drain: tc.drain})
			dial := func() (net.Conn, *bufio.Reader) {
				c, err := net.Dial("tcp", s.Addr.String())
				if err != nil {
					t.Fatal(err)
				}
				t.Cleanup(func() { c.Close() })
				_ = c.SetDeadline(time.Now().Add(15 * time.Second))
				return c, bufio.NewReader(c)
			}
			idle, idleR := dial()
			io.WriteString(idle, "GET /first HTTP/1.1\r\nHost: svc\r\n\r\n")
			if resp, err := http.ReadResponse(idleR, nil); err != nil || resp.StatusCode != 200 {
				t.Fatalf("first request: %v %v", resp, err)
			} else {
				io.Copy(io.Discard, resp.Body)
			}
			fresh, _ := dial() // accepted, nothing sent yet
			busy, busyR := dial()
			io.WriteString(busy, "GET /hold HTTP/1.1\r\nHost: svc\r\n\r\n")
			testkit.Eventually(t, 5*time.Second, "the request at the app", func() bool { return a.holding.Load() == 1 })

			start := time.Now()
			stopped := make(chan struct{})
			go func() { s.shutdown(); close(stopped) }()
			for name, c := range map[string]net.Conn{"idle keep-alive": idle, "fresh": fresh} {
				_ = c.SetReadDeadline(time.Now().Add(2 * time.Second))
				if n, err := c.Read(make([]byte, 1)); n != 0 || err != io.EOF {
					t.Errorf("%s connection at shutdown: read %d %v, want EOF at once", name, n, err)
				}
			}
			if tc.finish {
				close(a.release)
				resp, err := http.ReadResponse(busyR, nil)
				if err != nil || resp.StatusCode != 200 {
					t.Fatalf("request in flight at shutdown: %v %v, want 200", resp, err)
				}
				if b, err := io.ReadAll(resp.Body); err != nil || string(b) != "ok" {
					t.Fatalf("its body: %q %v", b, err)
				}
			} else {
				defer close(a.release)
			}
			if _, err := io.Copy(io.Discard, busyR); err != nil {
				t.Fatalf("busy connection not closed after the drain: %v", err)
			}
			checkDrained(t, stopped, start, tc.atLeast)
		})
	}
}
