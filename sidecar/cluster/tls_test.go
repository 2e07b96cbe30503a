package cluster_test

import (
	"bufio"
	"context"
	"io"
	"net"
	"net/netip"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/spiffe/go-spiffe/v2/spiffeid"

	"github.com/weft-mesh/weft/sidecar/cluster"
	"github.com/weft-mesh/weft/sidecar/mtls"
	"github.com/weft-mesh/weft/sidecar/mtls/mtlstest"
	"github.com/weft-mesh/weft/sidecar/svid"
)

type tlsPeer struct {
	m    *mtls.Manager
	addr netip.AddrPort
	// after is what the server does once it has answered a request: nothing,
	// send extra bytes, or close.
	after func(c net.Conn)
	done  chan struct{} // receives after each answer (and after), buffered
}

func manager(t *testing.T, ca *mtlstest.CA, sa string) *mtls.Manager {
	t.Helper()
	h := &svid.Holder{}
	h.Store(ca.Workload(t, "cluster.local", "shop", sa))
	return managerOf(t, ca, h)
}

// managerOf is a Manager presenting h's certificate and trusting ca.
func managerOf(t *testing.T, ca *mtlstest.CA, h *svid.Holder) *mtls.Manager {
	t.Helper()
	m, err := mtls.New(mtls.Config{SVID: h, Logger: hclog.NewNullLogger()})
	if err != nil {
		t.Fatal(err)
	}
	tr, err := mtls.NewTrust(ca.Bundle(t), ca.CRL(t, 1, time.Now().Add(-time.Minute), time.Hour))
	if err != nil {
		t.Fatal(err)
	}
	m.SetTrust(tr, true)
	return m
}

// serveTLSHTTP answers every HTTP/1.1 request on mTLS connections with "ok",
// then runs after.
func serveTLSHTTP(t *testing.T, p *tlsPeer) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p.addr = netip.MustParseAddrPort(ln.Addr().String())
	var wg sync.WaitGroup
	var mu sync.Mutex
	var open []net.Conn
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			raw, err := ln.Accept()
			if err != nil {
				return
			}
			wg.Add(1)
			go func() {
				defer wg.Done()
				c, err := p.m.Server(context.Background(), raw)
				if err != nil {
					return
				}
				mu.Lock()
				open = append(open, c)
				mu.Unlock()
				defer c.Close()
				br := bufio.NewReader(c)
				for {
					line, err := br.ReadString('\n')
					if err != nil {
						return
					}
					if line != "\r\n" {
						continue
					}
					if _, err := io.WriteString(c, "HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok"); err != nil {
						return
					}
					if p.after != nil {
						p.after(c)
					}
					p.done <- struct{}{}
				}
			}()
		}
	}()
	t.Cleanup(func() {
		ln.Close()
		mu.Lock()
		for _, c := range open {
			c.Close()
		}
		mu.Unlock()
		wg.Wait()
	})
}

func roundTrip(t *testing.T, pool *cluster.Pool, c *cluster.Cluster) (reused bool) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	uc, reused, err := pool.Get(ctx, c, c.Endpoints()[0])
	if err != nil {
		t.Fatal(err)
	}
	_ = uc.SetDeadline(time.Now().Add(5 * time.Second))
	if _, err := io.WriteString(uc.W, "GET / HTTP/1.1\r\nHost: x\r\n\r\n"); err != nil || uc.W.Flush() != nil {
		t.Fatal(err)
	}
	var resp strings.Builder
	for !strings.HasSuffix(resp.String(), "ok") {
		b, err := uc.R.ReadByte()
		if err != nil {
			t.Fatalf("response so far %q: %v", resp.String(), err)
		}
		resp.WriteByte(b)
	}
	pool.Put(uc)
	return reused
}

// TestPoolMTLSIdleCheck: the pool's idle check on an mTLS connection (crypto/tls
// records, not raw bytes, in the socket) keeps a quiet connection, and refuses
// one on which data or the peer's close arrived while it was idle.
func TestPoolMTLSIdleCheck(t *testing.T) {
	ca := mtlstest.NewCA(t, "root")
	for _, tc := range []struct {
		name       string
		after      func(c net.Conn)
		wantReused bool
	}{
		{"quiet connection reused", nil, true},
		{"data arrived while idle", func(c net.Conn) { _, _ = io.WriteString(c, "junk") }, false},
		{"peer closed while idle", func(c net.Conn) { c.Close() }, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := &tlsPeer{m: manager(t, ca, "reviews"), after: tc.after, done: make(chan struct{}, 8)}
			serveTLSHTTP(t, p)
			client := manager(t, ca, "productpage")
			up, err := mtls.NewUpstream("reviews", []spiffeid.ID{spiffeid.RequireFromString("spiffe://cluster.local/ns/shop/sa/reviews")}, nil)
			if err != nil {
				t.Fatal(err)
			}
			e := cluster.NewEndpoint(p.addr, 1, true)
			e.MTLS = true
			c, err := cluster.New(cluster.Spec{Name: "reviews", ConnectTimeout: time.Second, Endpoints: []*cluster.Endpoint{e}, TLS: up,
				Limits: limits})
			if err != nil {
				t.Fatal(err)
			}
			pool, err := cluster.NewPool(cluster.PoolConfig{MaxIdlePerHost: 4, IdleTimeout: time.Minute, BufferSize: 4096, MTLS: client})
			if err != nil {
				t.Fatal(err)
			}
			defer pool.Close()
			if roundTrip(t, pool, c) {
				t.Fatal("the first request reused a connection")
			}
			// The server's after has run (its write or close, on loopback, is in
			// our socket when the syscall returns) before the idle check.
			select {
			case <-p.done:
			case <-time.After(5 * time.Second):
				t.Fatal("the server did not answer")
			}
			if reused := roundTrip(t, pool, c); reused != tc.wantReused {
				t.Fatalf("second request reused=%v, want %v", reused, tc.wantReused)
			}
			if e.PoolKey() == e.Address() || !strings.HasSuffix(e.PoolKey(), "@"+e.Address()) {
				t.Errorf("pool key %q does not carry the verification", e.PoolKey())
			}
		})
	}
}
