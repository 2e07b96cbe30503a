package h2server

import (
	"bytes"
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"go.uber.org/goleak"
	"golang.org/x/net/http2"
	"golang.org/x/net/http2/hpack"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// serve starts s on a loopback listener and returns its address; the cleanup
// closes both and waits for every connection.
func serve(t *testing.T, cfg Config) (*Server, string) {
	t.Helper()
	s, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			wg.Add(1)
			go func() { defer wg.Done(); s.ServeConn(context.Background(), c, nil) }()
		}
	}()
	t.Cleanup(func() {
		ln.Close()
		s.Close()
		wg.Wait()
	})
	return s, ln.Addr().String()
}

// h2cClient is net/http's HTTP/2 client with prior knowledge, to addr.
func h2cClient(t *testing.T, addr string) *http.Client {
	var protos http.Protocols
	protos.SetUnencryptedHTTP2(true)
	tr := &http.Transport{Protocols: &protos, DialContext: func(ctx context.Context, network, _ string) (net.Conn, error) {
		return (&net.Dialer{}).DialContext(ctx, network, addr)
	}}
	t.Cleanup(tr.CloseIdleConnections)
	return &http.Client{Transport: tr, Timeout: 20 * time.Second}
}

// echo answers with the request's method, path and body, its trailers as
// response trailers, and "X-Size: n" bytes when asked.
func echo(w http.ResponseWriter, r *http.Request) {
	body, err := io.ReadAll(r.Body)
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	w.Header().Set("X-Method", r.Method)
	w.Header().Set("X-Path", r.URL.RequestURI())
	w.Header().Set("X-Host", r.Host)
	if n, _ := strconv.Atoi(r.Header.Get("X-Size")); n > 0 {
		body = bytes.Repeat([]byte("z"), n)
	}
	for k := range r.Trailer {
		w.Header().Add("Trailer", k)
	}
	if r.URL.Path == "/204" {
		w.WriteHeader(http.StatusNoContent)
		return
	}
	_, _ = w.Write(body)
	for k, v := range r.Trailer {
		w.Header()[k] = v
	}
	if r.URL.Path == "/prefixed-trailer" {
		w.Header().Set(http.TrailerPrefix+"Grpc-Status", "0")
	}
}

func TestRequestsFromNetHTTPClient(t *testing.T) {
	_, addr := serve(t, Config{Handler: http.HandlerFunc(echo)})
	c := h2cClient(t, addr)
	big := make([]byte, 3<<20) // past both receive windows: WINDOW_UPDATEs must flow
	_, _ = rand.Read(big)
	for _, tt := range []struct {
		name, method, path string
		body               []byte
		size               int
		trailer            http.Header
		wantStatus         int
		wantTrailer        http.Header
	}{
		{name: "get", method: "GET", path: "/a?b=c", wantStatus: 200},
		{name: "post", method: "POST", path: "/p", body: []byte("hello"), wantStatus: 200},
		{name: "big request body", method: "PUT", path: "/big", body: big, wantStatus: 200},
		{name: "big response", method: "GET", path: "/big", size: 5 << 20, wantStatus: 200},
		{name: "head", method: "HEAD", path: "/h", wantStatus: 200},
		{name: "no content", method: "GET", path: "/204", wantStatus: 204},
		{name: "request and response trailers", method: "POST", path: "/t", body: []byte("x"),
			trailer: http.Header{"X-T": {"1"}}, wantStatus: 200, wantTrailer: http.Header{"X-T": {"1"}}},
		{name: "prefixed trailer", method: "GET", path: "/prefixed-trailer", wantStatus: 200,
			wantTrailer: http.Header{"Grpc-Status": {"0"}}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			var body io.Reader
			if tt.body != nil {
				body = io.MultiReader(bytes.NewReader(tt.body)) // unknown length: no content-length
			}
			req, err := http.NewRequest(tt.method, "http://example.test"+tt.path, body)
			if err != nil {
				t.Fatal(err)
			}
			if tt.size > 0 {
				req.Header.Set("X-Size", strconv.Itoa(tt.size))
			}
			if tt.trailer != nil {
				req.Trailer = http.Header{}
				for k := range tt.trailer {
					req.Trailer[k] = nil
				}
				pr, pw := io.Pipe()
				req.Body = pr
				go func() {
					_, _ = pw.Write(tt.body)
					for k, v := range tt.trailer {
						req.Trailer[k] = v
					}
					pw.Close()
				}()
			}
			resp, err := c.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			got, err := io.ReadAll(resp.Body)
			resp.Body.Close()
			if err != nil {
				t.Fatal(err)
			}
			if resp.StatusCode != tt.wantStatus || resp.ProtoMajor != 2 {
				t.Fatalf("status %d proto %s, want %d over HTTP/2", resp.StatusCode, resp.Proto, tt.wantStatus)
			}
			want := tt.body
			if tt.size > 0 {
				want = bytes.Repeat([]byte("z"), tt.size)
			}
			if tt.method == "HEAD" || tt.wantStatus == 204 {
				want = nil
			}
			if !bytes.Equal(got, want) {
				t.Fatalf("body: %d bytes, want %d", len(got), len(want))
			}
			if tt.wantStatus == 200 && (resp.Header.Get("X-Method") != tt.method || resp.Header.Get("X-Path") != tt.path ||
				resp.Header.Get("X-Host") != "example.test") {
				t.Fatalf("request seen as %v", resp.Header)
			}
			for k, v := range tt.wantTrailer {
				if g := resp.Trailer[k]; len(g) != 1 || g[0] != v[0] {
					t.Fatalf("trailer %s = %q, want %q (all: %v)", k, g, v, resp.Trailer)
				}
			}
		})
	}
}

func TestManyConcurrentStreams(t *testing.T) {
	_, addr := serve(t, Config{Handler: http.HandlerFunc(echo)})
	c := h2cClient(t, addr)
	var wg sync.WaitGroup
	errs := make(chan error, 200)
	for i := range 200 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			want := fmt.Sprintf("body-%d-%s", i, strings.Repeat("x", i*97))
			resp, err := c.Post("http://h/"+strconv.Itoa(i), "text/plain", strings.NewReader(want))
			if err != nil {
				errs <- err
				return
			}
			got, err := io.ReadAll(resp.Body)
			resp.Body.Close()
			if err != nil || string(got) != want {
				errs <- fmt.Errorf("stream %d: %q, %v", i, clip(got), err)
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
}

func clip(b []byte) string {
	if len(b) > 40 {
		return string(b[:40]) + "..."
	}
	return string(b)
}

// rawClient speaks HTTP/2 frame by frame.
type rawClient struct {
	t    *testing.T
	c    net.Conn
	fr   *http2.Framer
	hbuf bytes.Buffer
	enc  *hpack.Encoder
}

// dial connects, sends the preface and settings, and reads up to the server's
// SETTINGS (ACKing it).
func dial(t *testing.T, addr string, settings ...http2.Setting) *rawClient {
	t.Helper()
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	rc := &rawClient{t: t, c: c, fr: http2.NewFramer(c, c)}
	rc.enc = hpack.NewEncoder(&rc.hbuf)
	rc.fr.ReadMetaHeaders = hpack.NewDecoder(4096, nil)
	rc.fr.SetMaxReadFrameSize(1 << 20)
	if _, err := io.WriteString(c, clientPreface); err != nil {
		t.Fatal(err)
	}
	if err := rc.fr.WriteSettings(settings...); err != nil {
		t.Fatal(err)
	}
	sf := rc.next(func(f http2.Frame) bool { s, ok := f.(*http2.SettingsFrame); return ok && !s.IsAck() })
	_ = sf
	if err := rc.fr.WriteSettingsAck(); err != nil {
		t.Fatal(err)
	}
	return rc
}

// next reads frames until match accepts one (5 s at most).
func (rc *rawClient) next(match func(http2.Frame) bool) http2.Frame {
	rc.t.Helper()
	_ = rc.c.SetReadDeadline(time.Now().Add(5 * time.Second))
	for {
		f, err := rc.fr.ReadFrame()
		if err != nil {
			rc.t.Fatalf("reading frames: %v", err)
		}
		if match(f) {
			return f
		}
	}
}

// until reads frames until match accepts one, or the connection ends (nil).
func (rc *rawClient) until(match func(http2.Frame) bool) (http2.Frame, error) {
	_ = rc.c.SetReadDeadline(time.Now().Add(5 * time.Second))
	for {
		f, err := rc.fr.ReadFrame()
		if err != nil {
			return nil, err
		}
		if match(f) {
			return f, nil
		}
	}
}

// headers sends a request's HEADERS on id; kv are field name, value pairs
// after the four pseudo-fields of GET http://h/.
func (rc *rawClient) headers(id uint32, end bool, kv ...string) {
	rc.t.Helper()
	rc.headersPath(id, end, "/", kv...)
}

func (rc *rawClient) headersPath(id uint32, end bool, path string, kv ...string) {
	rc.t.Helper()
	rc.hbuf.Reset()
	fields := append([]string{":method", "GET", ":scheme", "http", ":authority", "h", ":path", path}, kv...)
	for i := 0; i < len(fields); i += 2 {
		_ = rc.enc.WriteField(hpack.HeaderField{Name: fields[i], Value: fields[i+1]})
	}
	if err := rc.fr.WriteHeaders(http2.HeadersFrameParam{StreamID: id, BlockFragment: rc.hbuf.Bytes(), EndStream: end, EndHeaders: true}); err != nil {
		rc.t.Fatal(err)
	}
}

func isHeadersOf(id uint32) func(http2.Frame) bool {
	return func(f http2.Frame) bool { h, ok := f.(*http2.MetaHeadersFrame); return ok && h.StreamID == id }
}

func isRSTOf(id uint32) func(http2.Frame) bool {
	return func(f http2.Frame) bool { r, ok := f.(*http2.RSTStreamFrame); return ok && r.StreamID == id }
}

func isGoAway(f http2.Frame) bool { _, ok := f.(*http2.GoAwayFrame); return ok }

func TestMaxConcurrentStreamsAtBoundAndOnePast(t *testing.T) {
	const limit = 3
	release := make(chan struct{})
	_, addr := serve(t, Config{MaxConcurrentStreams: limit, Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		<-release
	})})
	rc := dial(t, addr)
	for i := range limit {
		rc.headers(uint32(2*i+1), true)
	}
	rc.headers(2*limit+1, true) // one past: refused
	rst := rc.next(isRSTOf(2*limit + 1)).(*http2.RSTStreamFrame)
	if rst.ErrCode != http2.ErrCodeRefusedStream {
		t.Fatalf("stream over the bound: RST_STREAM %v, want REFUSED_STREAM", rst.ErrCode)
	}
	close(release)
	answered := map[uint32]string{} // in any order
	for len(answered) < limit {
		h := rc.next(func(f http2.Frame) bool { _, ok := f.(*http2.MetaHeadersFrame); return ok }).(*http2.MetaHeadersFrame)
		answered[h.StreamID] = h.PseudoValue("status")
	}
	for i := range limit {
		if s := answered[uint32(2*i+1)]; s != "200" {
			t.Fatalf("stream %d at the bound: status %q (answers %v)", 2*i+1, s, answered)
		}
	}
}

func TestHeaderListSizeAtBoundAndOnePast(t *testing.T) {
	const limit = 4 << 10
	_, addr := serve(t, Config{MaxHeaderListSize: limit, Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {})})
	rc := dial(t, addr)
	// The pseudo-fields of rc.headers, each counted as name + value + 32.
	base := (len(":method") + 3 + 32) + (len(":scheme") + 4 + 32) + (len(":authority") + 1 + 32) + (len(":path") + 1 + 32)
	pad := limit - base - (len("x-pad") + 32)
	rc.headers(1, true, "x-pad", strings.Repeat("a", pad))
	if h := rc.next(isHeadersOf(1)).(*http2.MetaHeadersFrame); h.PseudoValue("status") != "200" {
		t.Fatalf("header list at the bound: status %s, want 200", h.PseudoValue("status"))
	}
	rc.headers(3, true, "x-pad", strings.Repeat("a", pad+1))
	if h := rc.next(isHeadersOf(3)).(*http2.MetaHeadersFrame); h.PseudoValue("status") != "431" {
		t.Fatalf("header list one past the bound: status %s, want 431", h.PseudoValue("status"))
	}
}

func TestFrameSizeAtBoundAndOnePast(t *testing.T) {
	_, addr := serve(t, Config{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		n, _ := io.Copy(io.Discard, r.Body)
		_, _ = fmt.Fprint(w, n)
	})})
	rc := dial(t, addr)
	rc.headers(1, false)
	if err := rc.fr.WriteData(1, true, make([]byte, DefaultMaxReadFrameSize)); err != nil {
		t.Fatal(err)
	}
	rc.next(isHeadersOf(1))
	d := rc.next(func(f http2.Frame) bool { _, ok := f.(*http2.DataFrame); return ok }).(*http2.DataFrame)
	if string(d.Data()) != strconv.Itoa(DefaultMaxReadFrameSize) {
		t.Fatalf("a DATA frame at the bound: the handler read %q", d.Data())
	}
	rc.headers(3, false)
	if err := rc.fr.WriteData(3, true, make([]byte, DefaultMaxReadFrameSize+1)); err != nil {
		t.Fatal(err)
	}
	g := rc.next(isGoAway).(*http2.GoAwayFrame)
	if g.ErrCode != http2.ErrCodeFrameSize {
		t.Fatalf("a DATA frame one past the bound: GOAWAY %v, want FRAME_SIZE_ERROR", g.ErrCode)
	}
}

func TestSendWindowBlocksWritesUntilUpdated(t *testing.T) {
	body := strings.Repeat("w", 100)
	_, addr := serve(t, Config{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.WriteString(w, body)
	})})
	rc := dial(t, addr, http2.Setting{ID: http2.SettingInitialWindowSize, Val: 10})
	rc.headers(1, true)
	var got []byte
	for len(got) < 10 {
		d := rc.next(func(f http2.Frame) bool { _, ok := f.(*http2.DataFrame); return ok }).(*http2.DataFrame)
		got = append(got, d.Data()...)
	}
	if len(got) != 10 {
		t.Fatalf("with a 10-byte window the server sent %d bytes", len(got))
	}
	if err := rc.fr.WriteWindowUpdate(1, 90); err != nil {
		t.Fatal(err)
	}
	for {
		d := rc.next(func(f http2.Frame) bool { _, ok := f.(*http2.DataFrame); return ok }).(*http2.DataFrame)
		got = append(got, d.Data()...)
		if d.StreamEnded() {
			break
		}
	}
	if string(got) != body {
		t.Fatalf("body %q, want %q", got, body)
	}
}

func TestPingAndSettingsAreAcked(t *testing.T) {
	_, addr := serve(t, Config{Handler: http.HandlerFunc(echo)})
	rc := dial(t, addr)
	rc.next(func(f http2.Frame) bool { s, ok := f.(*http2.SettingsFrame); return ok && s.IsAck() })
	data := [8]byte{1, 2, 3, 4, 5, 6, 7, 8}
	if err := rc.fr.WritePing(false, data); err != nil {
		t.Fatal(err)
	}
	p := rc.next(func(f http2.Frame) bool { _, ok := f.(*http2.PingFrame); return ok }).(*http2.PingFrame)
	if !p.IsAck() || p.Data != data {
		t.Fatalf("PING answered with ack=%v data=%v", p.IsAck(), p.Data)
	}
}

func TestClientResetEndsHandlerContext(t *testing.T) {
	ended := make(chan error, 1)
	started := make(chan struct{})
	_, addr := serve(t, Config{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/" {
			return
		}
		close(started)
		<-r.Context().Done()
		_, err := w.Write([]byte("late"))
		w.(http.Flusher).Flush()
		ended <- err
	})})
	rc := dial(t, addr)
	rc.headers(1, true)
	<-started
	if err := rc.fr.WriteRSTStream(1, http2.ErrCodeCancel); err != nil {
		t.Fatal(err)
	}
	select {
	case <-ended:
	case <-time.After(5 * time.Second):
		t.Fatal("the handler's context did not end after RST_STREAM")
	}
	// The connection still serves.
	rc.headersPath(3, true, "/again")
	rc.next(isHeadersOf(3))
}

func TestShutdownDrainsGracefully(t *testing.T) {
	release := make(chan struct{})
	started := make(chan struct{}, 1)
	s, addr := serve(t, Config{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		started <- struct{}{}
		<-release
		_, _ = io.WriteString(w, "done")
	})})
	rc := dial(t, addr)
	rc.headers(1, true)
	<-started
	shut := make(chan error, 1)
	go func() { shut <- s.Shutdown(context.Background()) }()
	g := rc.next(isGoAway).(*http2.GoAwayFrame)
	if g.ErrCode != http2.ErrCodeNo || g.LastStreamID != 1 {
		t.Fatalf("GOAWAY %v last %d, want NO_ERROR last 1", g.ErrCode, g.LastStreamID)
	}
	rc.headers(3, true) // after the GOAWAY: not taken
	close(release)
	var sawBody, saw3 bool
	for {
		f, err := rc.until(func(http2.Frame) bool { return true })
		if err != nil {
			break // the server closed after the last stream
		}
		switch f := f.(type) {
		case *http2.DataFrame:
			sawBody = sawBody || f.StreamID == 1 && string(f.Data()) == "done"
		case *http2.MetaHeadersFrame:
			saw3 = saw3 || f.StreamID == 3
		}
	}
	if !sawBody || saw3 {
		t.Fatalf("draining: stream 1 answered %v (want true), stream 3 answered %v (want false)", sawBody, saw3)
	}
	select {
	case err := <-shut:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("Shutdown did not return after the last stream")
	}
}

func TestProtocolErrorsEndInGoAway(t *testing.T) {
	for _, tt := range []struct {
		name string
		send func(rc *rawClient)
		want http2.ErrCode
	}{
		{"DATA on an idle stream", func(rc *rawClient) { _ = rc.fr.WriteData(5, true, []byte("x")) }, http2.ErrCodeProtocol},
		{"even stream id", func(rc *rawClient) { rc.headers(2, true) }, http2.ErrCodeProtocol},
		{"stream id going down", func(rc *rawClient) { rc.headers(5, true); rc.headers(3, true) }, http2.ErrCodeProtocol},
		{"connection window overflow", func(rc *rawClient) { _ = rc.fr.WriteWindowUpdate(0, 1<<31-1) }, http2.ErrCodeFlowControl},
		{"PUSH_PROMISE from a client", func(rc *rawClient) {
			_ = rc.fr.WritePushPromise(http2.PushPromiseParam{StreamID: 1, PromiseID: 2, EndHeaders: true})
		}, http2.ErrCodeProtocol},
	} {
		t.Run(tt.name, func(t *testing.T) {
			_, addr := serve(t, Config{Handler: http.HandlerFunc(echo)})
			rc := dial(t, addr)
			tt.send(rc)
			f, err := rc.until(isGoAway)
			if err != nil {
				t.Fatalf("no GOAWAY: %v", err)
			}
			if g := f.(*http2.GoAwayFrame); g.ErrCode != tt.want {
				t.Fatalf("GOAWAY %v, want %v", g.ErrCode, tt.want)
			}
			if _, err := rc.until(func(http2.Frame) bool { return false }); errors.Is(err, context.DeadlineExceeded) {
				t.Fatal("the connection stayed open after GOAWAY")
			}
		})
	}
}

func TestConfigBounds(t *testing.T) {
	h := http.HandlerFunc(echo)
	for _, tt := range []struct {
		name string
		cfg  Config
		ok   bool
	}{
		{"defaults", Config{Handler: h}, true},
		{"no handler", Config{}, false},
		{"streams at max", Config{Handler: h, MaxConcurrentStreams: MaxMaxConcurrentStreams}, true},
		{"streams one past", Config{Handler: h, MaxConcurrentStreams: MaxMaxConcurrentStreams + 1}, false},
		{"frame at min", Config{Handler: h, MaxReadFrameSize: MinMaxReadFrameSize}, true},
		{"frame one under", Config{Handler: h, MaxReadFrameSize: MinMaxReadFrameSize - 1}, false},
		{"frame at max", Config{Handler: h, MaxReadFrameSize: MaxMaxReadFrameSize}, true},
		{"frame one past", Config{Handler: h, MaxReadFrameSize: MaxMaxReadFrameSize + 1}, false},
		{"header list at max", Config{Handler: h, MaxHeaderListSize: MaxMaxHeaderListSize}, true},
		{"header list one past", Config{Handler: h, MaxHeaderListSize: MaxMaxHeaderListSize + 1}, false},
		{"window at min", Config{Handler: h, StreamWindow: MinWindow, ConnWindow: MinWindow}, true},
		{"stream window one under", Config{Handler: h, StreamWindow: MinWindow - 1}, false},
		{"conn window one past", Config{Handler: h, ConnWindow: MaxWindow + 1}, false},
		{"response buffer one past", Config{Handler: h, ResponseBufferBytes: MaxResponseBufferBytes + 1}, false},
	} {
		if _, err := New(tt.cfg); (err == nil) != tt.ok {
			t.Errorf("%s: New error %v, want ok=%v", tt.name, err, tt.ok)
		}
	}
}

// A graceful shutdown that lands between the client's preface and its first
// SETTINGS still closes the connection GoAwayTimeout later: the reader's
// clearing of the first-SETTINGS deadline must not cancel the GOAWAY's (it did,
// and the connection stayed open until the listener's drain timeout; found by
// sidecar/listener's TestShutdownClosesHTTP2Conns under -race, 3 runs in 10).
func TestShutdownBeforeClientSettings(t *testing.T) {
	s, err := New(Config{Handler: http.HandlerFunc(echo)})
	if err != nil {
		t.Fatal(err)
	}
	cs, ss := net.Pipe()
	defer cs.Close()
	served := make(chan struct{})
	go func() { defer close(served); s.ServeConn(context.Background(), ss, nil) }()
	defer s.Close()
	frames := make(chan http2.Frame, 16)
	go func() {
		defer close(frames)
		fr := http2.NewFramer(nil, cs)
		for {
			f, err := fr.ReadFrame()
			if err != nil {
				return
			}
			frames <- f
		}
	}()
	// net.Pipe is synchronous: once Write returns, the server has the preface.
	if _, err := io.WriteString(cs, http2.ClientPreface); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	shut := make(chan error, 1)
	go func() { shut <- s.Shutdown(ctx) }()
	for f := range frames {
		if isGoAway(f) {
			break
		}
	}
	// The client's SETTINGS arrive after the GOAWAY.
	if err := http2.NewFramer(cs, nil).WriteSettings(); err != nil {
		t.Fatal(err)
	}
	go func() {
		for range frames { // the SETTINGS ACK, then the end
		}
	}()
	select {
	case <-served:
	case <-time.After(GoAwayTimeout + 5*time.Second):
		t.Fatalf("connection still open %v after a GOAWAY sent before the client's SETTINGS (want it closed %v after)", GoAwayTimeout+5*time.Second, GoAwayTimeout)
	}
	if err := <-shut; err != nil {
		t.Errorf("Shutdown: %v, want nil once the connection closed", err)
	}
}
