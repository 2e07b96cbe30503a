package h2server

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"testing"
	"time"

	"golang.org/x/net/http2"
	"golang.org/x/net/http2/hpack"

	"github.com/weft-mesh/weft/tools/testkit"
)

// BodyBytesCommitted counts, per open request body, what is held unread plus the
// credit its client may still use (at most what its content-length has left),
// each connection at most its ConnWindow, and nothing once a stream or its
// connection ends.
func TestBodyBytesCommitted(t *testing.T) {
	const window = 256 << 10
	release, hold := make(chan struct{}), make(chan struct{})
	read := make(chan string, 4)
	s, addr := serve(t, Config{StreamWindow: window, ConnWindow: 2 * window, Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		<-release // not reading: what the client sends stays held
		if r.URL.Path == "/hold" {
			<-hold
		}
		if r.URL.Path == "/read" {
			b, _ := io.ReadAll(r.Body)
			read <- fmt.Sprint(len(b))
		}
	})})
	committed := func(want int64, what string) {
		t.Helper()
		testkit.Wait(t, 5*time.Second, func() error {
			if got := s.BodyBytesCommitted(); got != want {
				return fmt.Errorf("%s: BodyBytesCommitted = %d, want %d", what, got, want)
			}
			return nil
		})
	}
	t.Cleanup(func() { close(hold) }) // before serve's cleanup closes the server
	committed(0, "no connection")
	rc := dial(t, addr)
	rc.headersPath(1, true, "/get") // no body: nothing promised
	committed(0, "a GET")
	// A body of declared length 100, 40 bytes sent: 40 held + 60 to come.
	post(rc, 3, false, "/", "content-length", "100")
	committed(100, "content-length 100 before any DATA")
	if err := rc.fr.WriteData(3, false, make([]byte, 40)); err != nil {
		t.Fatal(err)
	}
	committed(100, "40 of 100 bytes held")
	// A body of unknown length: the whole stream window.
	post(rc, 5, false, "/")
	committed(100+window, "and a streaming body")
	// Two more streaming bodies: the connection's window caps its share.
	post(rc, 7, false, "/")
	post(rc, 9, false, "/")
	committed(2*window, "capped at the connection window")
	// A second connection counts on its own.
	rc2 := dial(t, addr)
	post(rc2, 1, false, "/read", "content-length", "10")
	committed(2*window+10, "a second connection")
	if err := rc2.fr.WriteData(1, true, make([]byte, 10)); err != nil {
		t.Fatal(err)
	}
	close(release)
	if got := <-read; got != "10" {
		t.Errorf("handler read %s bytes, want 10", got)
	}
	rc2.next(isHeadersOf(1))
	// The handlers returned before the bodies ended: the server reset those
	// streams, and what they held and promised is gone.
	reset := map[uint32]bool{}
	for len(reset) < 4 {
		f := rc.next(func(f http2.Frame) bool { _, ok := f.(*http2.RSTStreamFrame); return ok })
		reset[f.Header().StreamID] = true
	}
	if !reset[3] || !reset[5] || !reset[7] || !reset[9] {
		t.Errorf("streams reset: %v, want 3, 5, 7 and 9", reset)
	}
	committed(0, "every handler done")
	post(rc, 11, false, "/hold")
	committed(window, "a new streaming body")
	rc.c.Close()
	committed(0, "its connection closed")
}

// post sends a POST's HEADERS on id with fields kv after the pseudo-fields.
func post(rc *rawClient, id uint32, end bool, path string, kv ...string) {
	rc.t.Helper()
	rc.hbuf.Reset()
	fields := append([]string{":method", "POST", ":scheme", "http", ":authority", "h", ":path", path}, kv...)
	for i := 0; i < len(fields); i += 2 {
		_ = rc.enc.WriteField(hpack.HeaderField{Name: fields[i], Value: fields[i+1]})
	}
	if err := rc.fr.WriteHeaders(http2.HeadersFrameParam{StreamID: id, BlockFragment: rc.hbuf.Bytes(), EndStream: end, EndHeaders: true}); err != nil {
		rc.t.Fatal(err)
	}
}

// retireConn is a connection that hands its server a drain (a Retirer).
type retireConn struct {
	net.Conn
	drain chan func()
}

func (c retireConn) OnRetire(drain func()) { c.drain <- drain }

// A Retirer's drain is a graceful GOAWAY: the request in flight finishes, the
// connection takes no new stream, and it closes once idle.
func TestRetirerDrainIsGracefulGoAway(t *testing.T) {
	release, started := make(chan struct{}), make(chan struct{})
	s, err := New(Config{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/slow" {
			close(started)
			<-release
		}
		io.WriteString(w, "done "+r.URL.Path)
	})})
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	drains := make(chan func(), 1)
	served := make(chan struct{})
	go func() {
		defer close(served)
		nc, err := ln.Accept()
		if err != nil {
			return
		}
		s.ServeConn(context.Background(), retireConn{Conn: nc, drain: drains}, nil)
	}()
	t.Cleanup(func() { ln.Close(); s.Close(); <-served })
	rc := dial(t, ln.Addr().String())
	var drain func()
	select {
	case drain = <-drains:
	case <-time.After(5 * time.Second):
		t.Fatal("ServeConn registered no drain with a Retirer")
	}
	rc.headersPath(1, true, "/slow")
	<-started
	drain()
	ga := rc.next(isGoAway).(*http2.GoAwayFrame)
	if ga.ErrCode != http2.ErrCodeNo || ga.LastStreamID != 1 {
		t.Errorf("GOAWAY %v last stream %d, want NO_ERROR after stream 1", ga.ErrCode, ga.LastStreamID)
	}
	// The request in flight still finishes.
	close(release)
	rc.next(isHeadersOf(1))
	d := rc.next(func(f http2.Frame) bool { d, ok := f.(*http2.DataFrame); return ok && d.StreamID == 1 }).(*http2.DataFrame)
	if string(d.Data()) != "done /slow" {
		t.Errorf("stream 1 body %q, want %q", d.Data(), "done /slow")
	}
	// Then the connection closes.
	if _, err := rc.until(func(http2.Frame) bool { return false }); err == nil {
		t.Error("the drained connection did not close")
	}
}
