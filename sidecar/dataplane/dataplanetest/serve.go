package dataplanetest

import (
	"io"
	"net"
	"net/netip"
	"sync"
	"testing"
)

// ServeTCP runs handle for every connection to a fresh loopback listener until the
// test ends; then it closes the listener and open connections and waits for handlers.
func ServeTCP(tb testing.TB, handle func(net.Conn)) netip.AddrPort {
	tb.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		tb.Fatal(err)
	}
	var wg sync.WaitGroup
	var mu sync.Mutex
	conns := map[net.Conn]struct{}{}
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			mu.Lock()
			conns[c] = struct{}{}
			mu.Unlock()
			wg.Add(1)
			go func() {
				defer wg.Done()
				defer c.Close()
				handle(c)
			}()
		}
	}()
	tb.Cleanup(func() {
		ln.Close()
		mu.Lock()
		for c := range conns {
			c.Close()
		}
		mu.Unlock()
		wg.Wait()
	})
	return netip.MustParseAddrPort(ln.Addr().String())
}

// Echo copies a connection back to itself (use with ServeTCP).
func Echo(c net.Conn) { _, _ = io.Copy(c, c) }
