package resilience

import (
	"fmt"
	"net/http"
	"testing"
	"time"

	"github.com/weft-mesh/weft/conformance/internal/drillkit"
	"github.com/weft-mesh/weft/tools/testkit"
)

// Drill (d), issue #8: a retry storm. Every upstream fails every request (503)
// under 50 concurrent clients; the route allows 3 retries on 5xx, maxRetries is
// far out of reach, and the retry budget is 20% of active requests (minimum 1).
// Counted at the upstreams (a request number seen again is a retry), retries in
// flight never exceed 20% of the 50 requests in flight, and some are made.
func TestDrillRetryBudget(t *testing.T) {
	const base = "127.81.4"
	const clients, percent, minConc = 50, 20, 1
	ups := startUpstreams(t, base, "reviews-a", "reviews-b", "reviews-c")
	yaml := svcYAML("reviews", ups...) + routeYAML("reviews", "retries: {attempts: 3, retryOn: [5xx]}\n") +
		policyYAML("reviews", fmt.Sprintf("connectionPool: {maxRetries: 10000, retryBudget: {percent: %d, minConcurrency: %d}}\n", percent, minConc))
	_, sc := meshUp(t, base, yaml)
	for _, u := range ups {
		u.set(up503)
		u.delay.Store(int64(20 * time.Millisecond)) // so retries overlap in time
	}
	start := time.Now()
	lg := drillkit.StartPaced(t, sc.W, "reviews:9080", clients, 100000) // as fast as they are answered
	testkit.Eventually(t, 30*time.Second, "3,000 attempts at the upstreams", func() bool {
		n := 0
		for _, u := range ups {
			n += u.stats().hits(start, time.Time{})
		}
		return n >= 3000
	})
	lg.Stop()
	const key = "outbound|9080||reviews.shop.svc.cluster.local"
	made, refused := sc.Metric("weft_sidecar_http_retries_total"), sc.Metric("weft_sidecar_http_retries_refused_total")
	overBudget := sc.Metric(`weft_sidecar_breaker_overflows_total{limit="retryBudget",service="` + key + `"}`)
	t.Logf("sidecar: %.0f retries made, %.0f refused (%.0f by the retry budget)", made, refused, overBudget)
	k := ups[0].k.stats()
	s := summarize(lg.Since(start))
	limit := max(minConc, clients*percent/100)
	t.Logf("%s; at the upstreams: %d retries, at most %d in flight (budget %d of %d), at most %d requests in flight",
		s, k.retries, k.maxRetries, limit, clients, k.maxActive)
	if k.maxRetries > limit {
		t.Errorf("%d retries in flight at the upstreams, budget %d%% of %d requests = %d", k.maxRetries, percent, clients, limit)
	}
	if k.retries == 0 {
		t.Errorf("no retry at all: the budget allows %d at once", limit)
	}
	// The sidecar's account agrees with the upstreams': every retry it made
	// arrived, and the budget refused the rest.
	if made != float64(k.retries) || refused == 0 || overBudget != refused {
		t.Errorf("sidecar: %.0f retries made, %.0f refused, %.0f by the budget; the upstreams saw %d retries", made, refused, overBudget, k.retries)
	}
	if s.ok != 0 || s.codes[http.StatusServiceUnavailable] != s.n {
		t.Errorf("every request should fail with the upstream's 503: %s", s)
	}
	if k.maxActive > clients {
		t.Errorf("%d requests in flight at the upstreams, more than the %d clients", k.maxActive, clients)
	}
}
