package xdsclient

import (
	"fmt"
	"net"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	cachev3 "github.com/envoyproxy/go-control-plane/pkg/cache/v3"
	"google.golang.org/grpc/keepalive"

	"github.com/weft-mesh/weft/tools/testkit"
)

// blackhole is a TCP proxy that can silently stop delivering bytes while keeping
// connections open: a server host that vanished without a FIN or RST.
type blackhole struct {
	lis    net.Listener
	target string
	frozen atomic.Bool
	wg     sync.WaitGroup
	mu     sync.Mutex
	conns  []net.Conn
}

func newBlackhole(t *testing.T, target string) *blackhole {
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	b := &blackhole{lis: lis, target: target}
	b.wg.Add(1)
	go b.serve()
	t.Cleanup(b.close)
	return b
}

func (b *blackhole) serve() {
	defer b.wg.Done()
	for {
		in, err := b.lis.Accept()
		if err != nil {
			return
		}
		out, err := net.Dial("tcp", b.target)
		if err != nil {
			in.Close()
			continue
		}
		b.mu.Lock()
		b.conns = append(b.conns, in, out)
		b.mu.Unlock()
		b.wg.Add(2)
		go b.pipe(out, in)
		go b.pipe(in, out)
	}
}

// pipe copies src to dst, dropping everything while frozen.
func (b *blackhole) pipe(dst, src net.Conn) {
	defer b.wg.Done()
	buf := make([]byte, 32<<10)
	for {
		n, err := src.Read(buf)
		if n > 0 && !b.frozen.Load() {
			if _, werr := dst.Write(buf[:n]); werr != nil {
				return
			}
		}
		if err != nil { // EOF, reset or closed: the connection is over
			return
		}
	}
}

func (b *blackhole) close() {
	b.lis.Close()
	b.mu.Lock()
	for _, c := range b.conns {
		c.Close()
	}
	b.mu.Unlock()
	b.wg.Wait()
}

// TestKeepaliveDetectsVanishedServer: when the server stops answering without
// closing the connection, keepalive cuts the stream and the state stops being
// confirmed. Takes ~11s: grpc-go does not ping more often than every 10s.
func TestKeepaliveDetectsVanishedServer(t *testing.T) {
	cache := cachev3.NewSnapshotCache(true, cachev3.IDHash{}, quiet{})
	setSnapshot(t, cache, snapshot(t, "v1", listener("l1", "r1")))
	srv := startServer(t, cache, "127.0.0.1:0")
	bh := newBlackhole(t, srv.addr)
	cfg := testConfig(t, Delta, &applier{}, bh.lis.Addr().String())
	cfg.Keepalive = keepalive.ClientParameters{Time: 10 * time.Second, Timeout: time.Second}
	cfg.ConnectTimeout = 500 * time.Millisecond
	c := runClient(t, cfg)
	testkit.Eventually(t, waitTimeout, "v1 ACKed", func() bool { return ackedAll(srv.rec, "v1") })
	testkit.Wait(t, waitTimeout, confirmed(c))

	bh.frozen.Store(true)
	frozenAt := time.Now()
	testkit.Wait(t, 30*time.Second, func() error {
		if st := c.Status(); st.Connected || !st.StreamUpSince.IsZero() {
			return fmt.Errorf("stream still looks up after the server vanished: connected=%v up since %v", st.Connected, st.StreamUpSince)
		}
		return nil
	})
	later := time.Now().Add(time.Hour)
	if got := c.LastConfirmed(later); got.Equal(later) || got.After(time.Now()) {
		t.Fatalf("LastConfirmed %v still running after the server vanished", got)
	}
	t.Logf("vanished server detected after %v", time.Since(frozenAt).Round(100*time.Millisecond))
	if !holds(c, TypeListener, "l1") {
		t.Fatal("state lost")
	}
}
