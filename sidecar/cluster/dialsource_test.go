package cluster_test

import (
	"context"
	"net"
	"net/netip"
	"testing"

	"github.com/weft-mesh/weft/sidecar/cluster"
)

// TestSourceDialer: loopback destinations are dialled from the source (what
// the app sees as its peer), others are not; an unusable source falls back.
func TestSourceDialer(t *testing.T) {
	if err := cluster.CheckSource(cluster.InboundPassthroughSource); err != nil {
		t.Skipf("127.0.0.6 cannot be bound here: %v", err) // Linux routes all of 127/8 to lo
	}
	ln, err := net.Listen("tcp4", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	peers := make(chan string, 4)
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			peers <- c.RemoteAddr().(*net.TCPAddr).IP.String()
			c.Close()
		}
	}()
	for _, tc := range []struct {
		src  netip.Addr
		want string
	}{
		{cluster.InboundPassthroughSource, "127.0.0.6"},
		{netip.Addr{}, "127.0.0.1"},                      // no source: the kernel's
		{netip.MustParseAddr("192.0.2.77"), "127.0.0.1"}, // not a local address: EADDRNOTAVAIL, fallback
	} {
		d := &cluster.SourceDialer{V4: tc.src}
		c, err := d.Dial(context.Background(), ln.Addr().String())
		if err != nil {
			t.Fatalf("source %v: %v", tc.src, err)
		}
		c.Close()
		if got := <-peers; got != tc.want {
			t.Errorf("source %v: the app saw %s, want %s", tc.src, got, tc.want)
		}
	}
	// IPv6: ::6 only where it was added to lo (`sidecar intercept` does);
	// here most likely not: the fallback.
	if ln6, err := net.Listen("tcp6", "[::1]:0"); err == nil {
		defer ln6.Close()
		go func() {
			if c, err := ln6.Accept(); err == nil {
				peers <- c.RemoteAddr().(*net.TCPAddr).IP.String()
				c.Close()
			}
		}()
		d := &cluster.SourceDialer{V6: cluster.InboundPassthroughSource6}
		c, err := d.Dial(context.Background(), ln6.Addr().String())
		if err != nil {
			t.Fatal(err)
		}
		c.Close()
		want := "::1"
		if cluster.CheckSource(cluster.InboundPassthroughSource6) == nil {
			want = "::6"
		}
		if got := <-peers; got != want {
			t.Errorf("IPv6: the app saw %s, want %s", got, want)
		}
	}
	if err := cluster.CheckSource(netip.MustParseAddr("192.0.2.77")); err == nil {
		t.Error("CheckSource of a foreign address: no error")
	}
}
