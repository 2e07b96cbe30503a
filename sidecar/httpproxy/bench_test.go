package httpproxy_test

import (
	"bufio"
	"bytes"
	"io"
	"net"
	"net/netip"
	"strconv"
	"testing"

	"github.com/weft-mesh/weft/sidecar/admin"
	dt "github.com/weft-mesh/weft/sidecar/dataplane/dataplanetest"
)

// rawApp answers every request head with a fixed 1 KiB response, allocation-free, so
// a benchmark's allocations are the proxy's.
func rawApp(tb testing.TB) netip.AddrPort {
	body := bytes.Repeat([]byte("x"), 1024)
	resp := append([]byte("HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nContent-Length: "+strconv.Itoa(len(body))+"\r\n\r\n"), body...)
	return dt.ServeTCP(tb, func(c net.Conn) {
		br := bufio.NewReader(c)
		for {
			// Requests in this benchmark have no body: read to the blank line.
			for {
				l, err := br.ReadSlice('\n')
				if err != nil {
					return
				}
				if len(l) <= 2 {
					break
				}
			}
			if _, err := c.Write(resp); err != nil {
				return
			}
		}
	})
}

// BenchmarkHTTP1Proxy measures one keep-alive request through the HTTP/1.1 fast path
// (client → sidecar → app, 1 KiB response). Run: go test -bench HTTP1 -benchmem.
func BenchmarkHTTP1Proxy(b *testing.B) { benchHTTP1(b, sidecarOpts{}) }

// BenchmarkHTTP1ProxyObserved is BenchmarkHTTP1Proxy with the sidecar's request
// metrics recording every request: allocs/op must equal BenchmarkHTTP1Proxy's.
func BenchmarkHTTP1ProxyObserved(b *testing.B) {
	m, err := admin.NewRequestMetrics(admin.RequestMetricsConfig{})
	if err != nil {
		b.Fatal(err)
	}
	benchHTTP1(b, sidecarOpts{observer: m})
}

func benchHTTP1(b *testing.B, o sidecarOpts) {
	benchHTTP1With(b, o, func(r dt.Resources) dt.Resources { return r })
}

// benchHTTP1With is benchHTTP1 on dt.Simple's resources as edit changes them.
func benchHTTP1With(b *testing.B, o sidecarOpts, edit func(dt.Resources) dt.Resources) {
	app := rawApp(b)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	s := startSidecarB(b, ln, edit(dt.Simple("outbound", addrOf(ln), false, app)), o)
	b.RunParallel(func(pb *testing.PB) {
		c, err := net.Dial("tcp", s.Addr.String())
		if err != nil {
			b.Error(err)
			return
		}
		defer c.Close()
		req := []byte("GET /bench HTTP/1.1\r\nHost: svc\r\nUser-Agent: bench\r\nAccept: */*\r\n\r\n")
		br := bufio.NewReader(c)
		for pb.Next() {
			if _, err := c.Write(req); err != nil {
				b.Error(err)
				return
			}
			n := -1
			for {
				l, err := br.ReadSlice('\n')
				if err != nil {
					b.Error(err)
					return
				}
				if len(l) <= 2 {
					break
				}
				if bytes.HasPrefix(l, []byte("Content-Length: ")) {
					n, _ = strconv.Atoi(string(bytes.TrimSpace(l[16:])))
				}
			}
			if _, err := io.CopyN(io.Discard, br, int64(n)); err != nil {
				b.Error(err)
				return
			}
		}
	})
}
