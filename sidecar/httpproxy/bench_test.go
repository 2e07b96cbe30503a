package httpproxy_test

import (
	"bufio"
	"bytes"
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

// okBody is the 1 KiB body every benchmark app answers with.
var okBody = bytes.Repeat([]byte("x"), 1024)

// rawApp answers every request head with a fixed 1 KiB response, allocation-free, so
// a benchmark's allocations are the proxy's.
func rawApp(tb testing.TB) netip.AddrPort {
	resp := append([]byte("HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nContent-Length: "+strconv.Itoa(len(okBody))+"\r\n\r\n"), okBody...)
	return rawAppWith(tb, func() []byte { return resp })
}

// rawAppWith answers every request head with what respond returns (bytes it
// keeps: nothing is allocated per request).
func rawAppWith(tb testing.TB, respond func() []byte) netip.AddrPort {
	return dt.ServeTCP(tb, func(c net.Conn) {
		br := bufio.NewReader(c)
		for {
			// Requests in these benchmarks have no body: read to the blank line.
			for {
				l, err := br.ReadSlice('\n')
				if err != nil {
					return
				}
				if len(l) <= 2 {
					break
				}
			}
			if _, err := c.Write(respond()); err != nil {
				return
			}
		}
	})
}

// benchClients runs b.N keep-alive GETs against addr from parallel client
// connections, reading each answer whole; check (nil: none) judges each answer's
// Content-Length. The body is skipped with Discard, which allocates nothing, so
// allocs/op is the proxy's alone.
func benchClients(b *testing.B, addr string, check func(n int) bool) {
	b.RunParallel(func(pb *testing.PB) {
		c, err := net.Dial("tcp", addr)
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
			if check != nil && !check(n) {
				return
			}
			if _, err := br.Discard(n); err != nil {
				b.Error(err)
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
	benchClients(b, s.Addr.String(), nil)
}

// BenchmarkHTTP1ProxyRetried is BenchmarkHTTP1Proxy on a route that retries 5xx
// (back-off base 1ns: the wait is 0) to an app answering a random quarter of its
// requests 503: about a third of the requests are retried. allocs/op must equal
// BenchmarkHTTP1Proxy's: the retry path allocates nothing either.
func BenchmarkHTTP1ProxyRetried(b *testing.B) {
	ok := append([]byte("HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nContent-Length: "+strconv.Itoa(len(okBody))+"\r\n\r\n"), okBody...)
	fail := []byte("HTTP/1.1 503 Service Unavailable\r\nContent-Length: 0\r\n\r\n")
	app := rawAppWith(b, func() []byte {
		if rand.Uint64()%4 == 0 {
			return fail
		}
		return ok
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
	benchClients(b, s.Addr.String(), func(n int) bool {
		if n != len(okBody) {
			st := s.hp.RetryStats()
			b.Errorf("answer of %d bytes: a 503 was forwarded (retries %d, refused %d, past timeout %d)", n, st.Retries.Load(), st.RetriesRefused.Load(), st.RetriesNoTime.Load())
			return false
		}
		return true
	})
	b.ReportMetric(float64(s.hp.RetryStats().Retries.Load())/float64(b.N), "retries/op")
}
