//go:build linux

package redirect

import (
	"context"
	"fmt"
	"net"
	"net/netip"
)

// ProbeAddr is where the self-test connects: TEST-NET-1 (RFC 5737), which no
// application uses. Only the self-test's attachment redirects it.
var ProbeAddr = netip.MustParseAddrPort("192.0.2.1:9")

// SelfTest checks, on cgroup itself, that this process can load and attach
// the programs and that they work for it: it attaches a probe-only
// configuration (nothing but a connection to ProbeAddr is touched, so the
// pod's traffic is unaffected for the moment it runs), listens on 127.0.0.1,
// connects to ProbeAddr, and checks the connection reached the listener, the
// accepted socket's SO_ORIGINAL_DST and the client's getpeername both say
// ProbeAddr, then detaches.
//
// It runs in the calling process on purpose, not in a child cgroup: the
// sidecar (uid 1337 with CAP_BPF, CAP_NET_ADMIN, CAP_PERFMON) may not create
// cgroups, and SO_ORIGINAL_DST only works when the sidecar's own listener is
// inside the attached cgroup, which is exactly what this checks.
func SelfTest(ctx context.Context, cgroup string) (err error) {
	if _, ok := ctx.Deadline(); !ok {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, DefaultSelfTestTimeout)
		defer cancel()
	}
	defer func() {
		if err != nil {
			err = fmt.Errorf("ebpf self-test on %q: %w", cgroup, err)
		}
	}()
	var lc net.ListenConfig
	lc.SetMultipathTCP(false)
	ln, err := lc.Listen(ctx, "tcp4", "127.0.0.1:0")
	if err != nil {
		return fmt.Errorf("probe listener: %w", err)
	}
	defer ln.Close()
	port := uint16(ln.Addr().(*net.TCPAddr).Port)
	r, err := attach(Config{Cgroup: cgroup}, &probe{addr: ProbeAddr, to: port})
	if err != nil {
		return err
	}
	defer func() {
		if cerr := r.Close(); err == nil {
			err = cerr
		}
	}()

	type accepted struct {
		c   net.Conn
		err error
	}
	acc := make(chan accepted, 1)
	go func() {
		c, err := ln.Accept()
		acc <- accepted{c, err}
	}()
	var d net.Dialer
	c, err := d.DialContext(ctx, "tcp4", ProbeAddr.String())
	if err != nil {
		ln.Close()
		<-acc
		return fmt.Errorf("probe connection to %s was not redirected (is this process inside the cgroup?): %w", ProbeAddr, err)
	}
	defer c.Close()
	var a accepted
	select {
	case a = <-acc:
	case <-ctx.Done():
		ln.Close()
		a = <-acc
		if a.err == nil {
			a.c.Close()
		}
		return fmt.Errorf("probe connection not accepted: %w", ctx.Err())
	}
	if a.err != nil {
		return fmt.Errorf("probe accept: %w", a.err)
	}
	defer a.c.Close()
	if got := a.c.RemoteAddr().String(); got != c.LocalAddr().String() {
		return fmt.Errorf("probe listener accepted %s, not the probe connection %s", got, c.LocalAddr())
	}
	od, err := OriginalDst(a.c.(*net.TCPConn))
	if err != nil {
		return fmt.Errorf("probe's original destination: %w", err)
	}
	if od != ProbeAddr {
		return fmt.Errorf("probe's SO_ORIGINAL_DST is %s, want %s", od, ProbeAddr)
	}
	peer, ok := c.RemoteAddr().(*net.TCPAddr)
	if !ok || peer.AddrPort() != ProbeAddr {
		return fmt.Errorf("probe's getpeername is %v, want %s", c.RemoteAddr(), ProbeAddr)
	}
	return nil
}
