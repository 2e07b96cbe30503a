package httpproxy_test

import (
	"io"
	"net/http"
	"testing"
	"time"

	"github.com/weft-mesh/weft/sidecar/circuitbreak"
	dt "github.com/weft-mesh/weft/sidecar/dataplane/dataplanetest"
	"github.com/weft-mesh/weft/sidecar/httpproxy"
	"github.com/weft-mesh/weft/sidecar/xdsresource"
	"github.com/weft-mesh/weft/tools/testkit"
)

type result struct {
	code     int
	overflow string
	local    string
	took     time.Duration
	err      error
}

func getAsync(c *http.Client, url string) <-chan result {
	ch := make(chan result, 1)
	go func() {
		start := time.Now()
		resp, err := c.Get(url)
		if err != nil {
			ch <- result{err: err}
			return
		}
		_, _ = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		ch <- result{code: resp.StatusCode, overflow: resp.Header.Get(httpproxy.OverflowHeader),
			local: resp.Header.Get(httpproxy.LocalHeader), took: time.Since(start)}
	}()
	return ch
}

// Every circuit-breaker overflow is answered at once with 503, the limit's API name
// in x-weft-overflow and x-weft-local: overflow, over HTTP/1.1 and HTTP/2 clients:
// maxRequests when the requests in flight are at the limit; maxPendingRequests when
// the queue of requests waiting for a connection is full; maxConnections when a
// queued request's queue timeout passes.
func TestBreakerOverflowAnswers(t *testing.T) {
	const queueTimeout = 200 * time.Millisecond
	for _, tc := range []struct {
		name   string
		client func(*testing.T) *http.Client
	}{{"h1", client}, {"h2", h2cClient}} {
		t.Run(tc.name, func(t *testing.T) {
			release := make(chan struct{})
			a := startApp(t, func(w http.ResponseWriter, r *http.Request) {
				if r.URL.Path == "/hold" {
					<-release
				}
			})
			defer close(release)
			ln := listen(t)
			res := dt.Resources{}
			res.Add(xdsresource.ListenerType, dt.HTTPListener("outbound", addrOf(ln), "routes"))
			res.Add(xdsresource.RouteType, dt.RouteConfig("routes", dt.VirtualHost("svc", []string{"*"},
				dt.PrefixRoute("/", "app", 0))))
			res.Add(xdsresource.ClusterType, dt.EDSCluster("app", dt.ClusterOpts{MaxConns: 1, MaxPend: 1, MaxReqs: 2}))
			res.Add(xdsresource.EndpointType, dt.Endpoints("app", a.ap()))
			s := startSidecar(t, ln, res, sidecarOpts{queueTimeout: queueTimeout})
			b := s.snap.Load().Cluster("app").Breaker
			base := "http://" + s.Addr.String()
			// Each request on its own client connection, so the sidecar sees them
			// concurrently whatever the client's protocol.
			hold := getAsync(tc.client(t), base+"/hold") // takes the one connection
			testkit.Eventually(t, 5*time.Second, "the first request at the upstream", func() bool { return a.reqs.Load() == 1 })
			queued := getAsync(tc.client(t), base+"/") // waits for it as pending
			testkit.Eventually(t, 5*time.Second, "the second request pending", func() bool { return b.InUse(circuitbreak.Pending) == 1 })

			over := <-getAsync(tc.client(t), base+"/") // two in flight: maxRequests
			if over.err != nil || over.code != 503 || over.overflow != "maxRequests" || over.local != httpproxy.LocalOverflow {
				t.Errorf("third request: %+v, want 503 maxRequests overflow", over)
			}
			r := <-queued
			if r.err != nil || r.code != 503 || r.overflow != "maxConnections" || r.local != httpproxy.LocalOverflow {
				t.Errorf("queued request: %+v, want 503 maxConnections overflow", r)
			}
			if r.took < queueTimeout {
				t.Errorf("queued request answered after %v, before its queue timeout %v", r.took, queueTimeout)
			}
			// The queue at its bound (one waiting) refuses the next at once.
			queued = getAsync(tc.client(t), base+"/")
			testkit.Eventually(t, 5*time.Second, "a request pending again", func() bool { return b.InUse(circuitbreak.Pending) == 1 })
			// Raised in place, as an activation does: a third request now gets
			// past maxRequests and finds the queue full.
			lim := b.Limits()
			lim.MaxRequests = 3
			if err := b.SetLimits(lim); err != nil {
				t.Fatal(err)
			}
			full := <-getAsync(tc.client(t), base+"/")
			if full.err != nil || full.code != 503 || full.overflow != "maxPendingRequests" || full.local != httpproxy.LocalOverflow {
				t.Errorf("one past the queue: %+v, want 503 maxPendingRequests overflow", full)
			}
			if full.took >= queueTimeout {
				t.Errorf("one past the queue answered after %v: not at once", full.took)
			}
			<-queued
			for l, want := range map[circuitbreak.Limit]uint64{circuitbreak.MaxRequests: 1, circuitbreak.MaxConnections: 2, circuitbreak.MaxPendingRequests: 1} {
				if got := b.Overflows(l); got != want {
					t.Errorf("overflows of %s: %d, want %d", l, got, want)
				}
			}
			release <- struct{}{}
			if r := <-hold; r.err != nil || r.code != 200 {
				t.Errorf("held request: %+v", r)
			}
		})
	}
}
