package httpproxy_test

import (
	"bufio"
	"bytes"
	"io"
	"math/rand/v2"
	"net"
	"net/netip"
	"strconv"
	"testing"
	"time"

	routev3 "github.com/envoyproxy/go-control-plane/envoy/config/route/v3"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/weft-mesh/weft/sidecar/admin"
	dt "github.com/weft-mesh/weft/sidecar/dataplane/dataplanetest"
	"github.com/weft-mesh/weft/sidecar/xdsresource"
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

// BenchmarkHTTP1ProxyRetried is BenchmarkHTTP1Proxy on a route that retries 5xx
// (back-off base 1ns: the wait is 0) to an app answering a random quarter of its
// requests 503: about a third of the requests are retried. allocs/op must equal
// BenchmarkHTTP1Proxy's: the retry path allocates nothing either.
func BenchmarkHTTP1ProxyRetried(b *testing.B) {
	body := bytes.Repeat([]byte("x"), 1024)
	ok := append([]byte("HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nContent-Length: "+strconv.Itoa(len(body))+"\r\n\r\n"), body...)
	fail := []byte("HTTP/1.1 503 Service Unavailable\r\nContent-Length: 0\r\n\r\n")
	app := dt.ServeTCP(b, func(c net.Conn) {
		br := bufio.NewReader(c)
		for {
			for {
				l, err := br.ReadSlice('\n')
				if err != nil {
					return
				}
				if len(l) <= 2 {
					break
				}
			}
			resp := ok
			if rand.Uint64()%4 == 0 {
				resp = fail
			}
			if _, err := c.Write(resp); err != nil {
				return
			}
		}
	})
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	res := dt.Simple("outbound", addrOf(ln), false, app)
	for _, m := range res[xdsresource.RouteType] {
		for _, vh := range m.(*routev3.RouteConfiguration).GetVirtualHosts() {
			for _, r := range vh.GetRoutes() {
				r.GetRoute().RetryPolicy = &routev3.RetryPolicy{RetryOn: "5xx", NumRetries: wrapperspb.UInt32(10),
					RetryBackOff: &routev3.RetryPolicy_RetryBackOff{BaseInterval: durationpb.New(time.Nanosecond)}}
			}
		}
	}
	s := startSidecarB(b, ln, res, sidecarOpts{})
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
			if n != 1024 {
				st := s.hp.RetryStats()
				b.Errorf("answer of %d bytes: a 503 was forwarded (retries %d, refused %d, past timeout %d)", n, st.Retries.Load(), st.RetriesRefused.Load(), st.RetriesNoTime.Load())
				return
			}
			if _, err := io.CopyN(io.Discard, br, int64(n)); err != nil {
				b.Error(err)
				return
			}
		}
	})
	b.ReportMetric(float64(s.hp.RetryStats().Retries.Load())/float64(b.N), "retries/op")
}
