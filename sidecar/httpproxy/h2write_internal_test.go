package httpproxy

import (
	"bytes"
	"errors"
	"io"
	"net"
	"sync"
	"testing"
	"time"

	"github.com/weft-mesh/weft/tools/testkit"
)

// countConn counts the socket writes under a writeBehind and can make them fail.
type countConn struct {
	net.Conn
	mu     sync.Mutex
	writes int
	fail   error
}

func (c *countConn) Write(p []byte) (int, error) {
	c.mu.Lock()
	c.writes++
	fail := c.fail
	c.mu.Unlock()
	if fail != nil {
		return 0, fail
	}
	return c.Conn.Write(p)
}

func (c *countConn) count() int { c.mu.Lock(); defer c.mu.Unlock(); return c.writes }

// tcpPair is a real loopback TCP connection.
func tcpPair(t *testing.T) (client, server net.Conn) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	acc := make(chan net.Conn, 1)
	go func() { c, _ := ln.Accept(); acc <- c }()
	client, err = net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	server = <-acc
	if server == nil {
		t.Fatal("accept failed")
	}
	t.Cleanup(func() { client.Close(); server.Close() })
	return client, server
}

// Writes in a row from one goroutine (as the server loop's, each waiting for
// the one before) arrive whole, in order, in fewer socket writes; a long one
// goes out after what was held; close writes what is held before returning.
func TestWriteBehindOrderAndCoalescing(t *testing.T) {
	peer, sc := tcpPair(t)
	cc := &countConn{Conn: sc}
	w := newWriteBehind(cc)
	var want bytes.Buffer
	for i := range 100 {
		p := bytes.Repeat([]byte{byte('a' + i%26)}, 1+i*37%900)
		want.Write(p)
		if n, err := w.Write(p); n != len(p) || err != nil {
			t.Fatalf("Write %d: %d, %v", i, n, err)
		}
	}
	long := bytes.Repeat([]byte{'L'}, H2DirectWriteBytes) // at the bound: direct
	want.Write(long)
	if n, err := w.Write(long); n != len(long) || err != nil {
		t.Fatalf("long Write: %d, %v", n, err)
	}
	tail := []byte("tail")
	want.Write(tail)
	w.Write(tail)
	w.close()
	if _, err := w.Write([]byte("x")); !errors.Is(err, net.ErrClosed) {
		t.Fatalf("Write after close: %v, want net.ErrClosed", err)
	}
	sc.Close()
	got, err := io.ReadAll(peer)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, want.Bytes()) {
		t.Fatalf("peer got %d bytes, want %d (order or content differs)", len(got), want.Len())
	}
	if n := cc.count(); n >= 102 {
		t.Fatalf("%d socket writes for 102 Writes: nothing joined", n)
	}
}

// A peer that stops reading: held bytes stop at H2WriteBehindBytes (a Write
// that would pass it waits), and close returns after H2CloseFlushTimeout.
func TestWriteBehindBackpressureAndCloseBound(t *testing.T) {
	sc, peer := net.Pipe() // the peer never reads: every socket write blocks
	defer peer.Close()
	defer sc.Close()
	w := newWriteBehind(sc)
	chunk := make([]byte, H2DirectWriteBytes-1) // the longest held write
	blocked := make(chan struct{})
	go func() {
		defer close(blocked)
		for {
			if _, err := w.Write(chunk); err != nil {
				return
			}
		}
	}()
	// The first socket write blocks; then the writer waits with at most the bound held.
	testkit.Eventually(t, 5*time.Second, "a Write waiting at the bound", func() bool {
		w.mu.Lock()
		defer w.mu.Unlock()
		return w.writing && len(w.held)+len(chunk) > H2WriteBehindBytes
	})
	w.mu.Lock()
	if held := len(w.held); held > H2WriteBehindBytes {
		t.Errorf("held %d bytes, bound %d", held, H2WriteBehindBytes)
	}
	w.mu.Unlock()
	start := time.Now()
	w.close()
	if d := time.Since(start); d < H2CloseFlushTimeout/2 || d > 10*H2CloseFlushTimeout {
		t.Errorf("close took %v with a peer not reading, want about %v", d, H2CloseFlushTimeout)
	}
	<-blocked
}

// A failed socket write is returned by the next Write, and close does not wait.
func TestWriteBehindError(t *testing.T) {
	_, sc := tcpPair(t)
	boom := errors.New("boom")
	cc := &countConn{Conn: sc, fail: boom}
	w := newWriteBehind(cc)
	if _, err := w.Write([]byte("a")); err != nil {
		t.Fatalf("first Write: %v", err)
	}
	testkit.Eventually(t, 5*time.Second, "the write error surfacing", func() bool {
		_, err := w.Write([]byte("b"))
		return errors.Is(err, boom)
	})
	if _, err := w.Write(make([]byte, H2DirectWriteBytes)); !errors.Is(err, boom) {
		t.Fatalf("direct Write after the failure: %v, want boom", err)
	}
	w.close()
}
