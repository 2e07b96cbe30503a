package listener_test

import (
	"errors"
	"net"
	"testing"

	"github.com/weft-mesh/weft/sidecar/listener"
)

func TestMerge(t *testing.T) {
	a, err := net.Listen("tcp4", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	b, err := net.Listen("tcp4", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	if listener.Merge(a) != a {
		t.Error("one listener is not wrapped")
	}
	m := listener.Merge(a, b)
	if m.Addr() != a.Addr() {
		t.Errorf("Addr %v, want the first's %v", m.Addr(), a.Addr())
	}
	for _, ln := range []net.Listener{a, b, b, a} {
		c, err := net.Dial("tcp", ln.Addr().String())
		if err != nil {
			t.Fatal(err)
		}
		s, err := m.Accept()
		if err != nil {
			t.Fatal(err)
		}
		if s.LocalAddr().String() != ln.Addr().String() {
			t.Errorf("accepted on %v, want %v", s.LocalAddr(), ln.Addr())
		}
		s.Close()
		c.Close()
	}
	// One closing closes the merge; Close then closes the rest and waits.
	a.Close()
	if _, err := m.Accept(); !errors.Is(err, net.ErrClosed) {
		t.Errorf("after a listener closed: %v", err)
	}
	if err := m.Close(); err != nil && !errors.Is(err, net.ErrClosed) {
		t.Errorf("Close: %v", err)
	}
	if _, err := net.Dial("tcp", b.Addr().String()); err == nil {
		t.Error("the other listener still accepts after Close")
	}
}
