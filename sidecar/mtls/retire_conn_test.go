package mtls_test

import (
	"testing"
	"time"

	"github.com/weft-mesh/weft/sidecar/mtls"
)

// last is the server side of the newest connection.
func (s *server) last(t *testing.T) *mtls.Conn {
	t.Helper()
	s.mu.Lock()
	defer s.mu.Unlock()
	if len(s.open) == 0 {
		t.Fatal("no server connection")
	}
	return s.open[len(s.open)-1]
}

// Sweep runs a connection's OnRetire drain once, when this sidecar renewed its
// certificate since the handshake or the peer's certificate passed its retire
// point; before either, never; a connection without one is left alone until
// NotAfter cuts it.
func TestSweepRunsOnRetireOnce(t *testing.T) {
	w := newWorld(t)
	fired := make(chan string, 4)
	watch := func(c *mtls.Conn, name string) { c.OnRetire(func() { fired <- name }) }
	expect := func(want string) {
		t.Helper()
		select {
		case got := <-fired:
			if got != want {
				t.Fatalf("drain of %s ran, want %s", got, want)
			}
		case <-time.After(5 * time.Second):
			t.Fatalf("drain of %s did not run", want)
		}
	}
	none := func(when string) {
		t.Helper()
		select {
		case got := <-fired:
			t.Fatalf("%s: drain of %s ran", when, got)
		default:
		}
	}

	// Renewed: the server's own certificate generation moved on.
	if _, err := dial(t, w.cli.m, w.server.addr, upstream(t, reviews)); err != nil {
		t.Fatal(err)
	}
	renewed := w.server.last(t)
	watch(renewed, "renewed")
	w.srv.m.Sweep(w.clk.Now())
	none("fresh")
	w.srv.h.Store(w.ca.Workload(t, td, "shop", "reviews"))
	w.srv.m.Sweep(w.clk.Now())
	expect("renewed")
	w.srv.m.Sweep(w.clk.Now())
	none("swept again")

	// Old peer certificate: its retire point passes (before its NotAfter).
	if _, err := dial(t, w.cli.m, w.server.addr, upstream(t, reviews)); err != nil {
		t.Fatal(err)
	}
	old := w.server.last(t)
	watch(old, "old peer")
	at := old.RetireAt()
	if !at.After(w.clk.Now()) || !at.Before(old.Peer().NotAfter) {
		t.Fatalf("RetireAt %v: want after now %v and before the peer's NotAfter %v", at, w.clk.Now(), old.Peer().NotAfter)
	}
	w.clk.Set(at.Add(-time.Nanosecond))
	w.srv.m.Sweep(w.clk.Now())
	none("a nanosecond before the retire point")
	w.clk.Set(at)
	w.srv.m.Sweep(w.clk.Now())
	expect("old peer")
	if n := w.srv.m.Counts().Retired; n != 2 {
		t.Errorf("Counts().Retired = %d, want 2", n)
	}
	// The client side registered no drain: nothing ran for it, and it is open.
	w.cli.m.Sweep(w.clk.Now())
	none("client side")
	if w.cli.m.Live() != 2 {
		t.Errorf("client live %d, want 2 (retiring is not closing)", w.cli.m.Live())
	}
}
