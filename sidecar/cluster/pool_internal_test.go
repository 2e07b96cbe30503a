package cluster

import (
	"context"
	"io"
	"net"
	"net/netip"
	"sync"
	"testing"
	"time"

	"github.com/weft-mesh/weft/sidecar/circuitbreak"
)

// serveDiscard accepts connections on loopback and reads them to the end, until
// the test ends.
func serveDiscard(t *testing.T) netip.AddrPort {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	var mu sync.Mutex
	var conns []net.Conn
	wg.Go(func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			mu.Lock()
			conns = append(conns, c)
			mu.Unlock()
			wg.Go(func() { _, _ = io.Copy(io.Discard, c) })
		}
	})
	t.Cleanup(func() {
		ln.Close()
		mu.Lock()
		for _, c := range conns {
			c.Close()
		}
		mu.Unlock()
		wg.Wait()
	})
	return netip.MustParseAddrPort(ln.Addr().String())
}

// A request on its way to waiting (admitted as pending, not yet registered) is
// not handed a connection put back meanwhile: Put finds no waiter and pools it.
// wait must then not wait beside it for the queue timeout (it did: seen as
// TestPoolLimits' pending Get overflowing maxConnections after 1s under load) but
// send the request back to take it, or, for an idle connection of its Service to
// another address, to evict it for its slot.
func TestPoolWaitNotBesideIdle(t *testing.T) {
	a, b := serveDiscard(t), serveDiscard(t)
	for _, tc := range []struct {
		name     string
		idleTo   netip.AddrPort // where the pooled connection goes
		waitsFor netip.AddrPort
	}{
		{"same address", a, a},
		{"another address of the Service", b, a},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p, err := NewPool(PoolConfig{MaxIdlePerHost: 4, IdleTimeout: time.Minute, BufferSize: 4096})
			if err != nil {
				t.Fatal(err)
			}
			defer p.Close()
			eIdle, eWait := NewEndpoint(tc.idleTo, 1, true), NewEndpoint(tc.waitsFor, 1, true)
			eps := []*Endpoint{eIdle}
			if tc.idleTo != tc.waitsFor {
				eps = append(eps, eWait)
			}
			c, err := New(Spec{Name: "c", ConnectTimeout: time.Second, QueueTimeout: time.Minute,
				Limits: circuitbreak.Limits{MaxConnections: 1, MaxPendingRequests: 1, MaxRequests: 10}, Endpoints: eps})
			if err != nil {
				t.Fatal(err)
			}
			held, _, err := p.Get(context.Background(), c, eIdle)
			if err != nil {
				t.Fatal(err)
			}
			q, err := p.enqueue(c) // the request, pending: then the Put
			if err != nil {
				t.Fatal(err)
			}
			defer q.stop()
			p.Put(held)
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()
			start := time.Now()
			conn, err := p.wait(ctx, c, eWait.Address(), q)
			if err != nil || conn != nil {
				t.Fatalf("wait beside an idle connection: %v, %v after %v; want (nil, nil) at once: look again", conn, err, time.Since(start))
			}
			// Looking again, Get finds it (or its slot).
			got, _, err := p.Get(ctx, c, eWait)
			if err != nil {
				t.Fatalf("Get after: %v", err)
			}
			if tc.idleTo == tc.waitsFor && got != held {
				t.Error("Get did not take the idle connection")
			}
			got.Close()
		})
	}
}
