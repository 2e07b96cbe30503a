package resilience

import (
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/weft-mesh/weft/conformance/internal/drillkit"
	"github.com/weft-mesh/weft/tools/testkit"
)

// The rate-limit drill's policy: 100 requests per second, a burst of 100. The
// burst is what lets a token bucket's answers be measured from outside on a
// busy machine: a pause of the load generator or the sidecar shorter than
// burst/rate (1s) loses no token (what was not sent during it is sent after it,
// and the bucket holds the tokens that came meanwhile).
const (
	limitRPS   = 100
	limitBurst = 100
	reviewsKey = "outbound|9080||reviews.shop.svc.cluster.local"
)

// Drill (f), issue #8: a rate limit of 100 rps. 1 % under it (99 rps) nothing
// is refused; at twice the limit the requests served between the first and the
// last refusal (the bucket empty at both ends) come at the limit within 1 %,
// every other one is answered 429 with
// retry-after, x-weft-ratelimited and x-weft-local, without reaching the
// upstream, and the sidecar's /metrics count exactly what the client saw. Then
// the policy turns to dryRun through pilot: the same overload is all served,
// and counted as would-be rejections.
func TestDrillRateLimit(t *testing.T) {
	const base = "127.81.16"
	ups := startUpstreams(t, base, "reviews-a")
	yaml := svcYAML("reviews", ups...)
	policy := func(dry bool) string {
		return policyYAML("reviews", fmt.Sprintf("localRateLimit: {requestsPerSecond: %d, burst: %d, dryRun: %v}\n", limitRPS, limitBurst, dry))
	}
	p, sc := meshUp(t, base, yaml+policy(false))
	const host = "reviews:9080"

	// 1 % under the limit: nothing refused.
	underStart := time.Now()
	under := drillkit.StartRate(t, sc.W, host, limitRPS*99/100)
	testkit.Eventually(t, 30*time.Second, "3s of load at 99 rps", func() bool { return time.Since(underStart) >= 3*time.Second })
	under.Stop()
	if s := summarize(under.Since(underStart)); s.ok != s.n || s.n < 250 {
		t.Fatalf("at 99%% of the limit: %s, want every request served", s)
	}

	// Twice the limit for 7s.
	overStart := time.Now()
	over := drillkit.StartRate(t, sc.W, host, 2*limitRPS)
	// While the overload runs, one 429 of our own, to read its headers.
	var h http.Header
	probesServed := 0
	testkit.Wait(t, 20*time.Second, func() error {
		code, _, hdr, err := drillkit.Get(drillkit.Client, sc.W, host, "/probe")
		if err != nil {
			return err
		}
		if code != http.StatusTooManyRequests {
			if code == http.StatusOK {
				probesServed++
			}
			return fmt.Errorf("probe answered %d", code)
		}
		h = hdr
		return nil
	})
	testkit.Eventually(t, 30*time.Second, "7s of load at 200 rps", func() bool { return time.Since(overStart) >= 7*time.Second })
	over.Stop()
	if got := h.Get("X-Weft-Ratelimited"); got != reviewsKey {
		t.Errorf("x-weft-ratelimited %q, want %q", got, reviewsKey)
	}
	if got := h.Get("X-Weft-Local"); got != "ratelimit" {
		t.Errorf("x-weft-local %q, want ratelimit", got)
	}
	if ra, err := strconv.Atoi(h.Get("Retry-After")); err != nil || ra != 1 {
		t.Errorf("retry-after %q, want 1 (a token is back within 10ms)", h.Get("Retry-After"))
	}

	rs := over.Since(overStart)
	var first429, last429 time.Time
	for _, r := range rs {
		if r.Err != nil || (r.Code != http.StatusOK && r.Code != http.StatusTooManyRequests) {
			t.Fatalf("overload: a request answered %d %v (%q), want only 200 and 429", r.Code, r.Err, r.Body)
		}
		if r.Code != http.StatusTooManyRequests {
			continue
		}
		if first429.IsZero() || r.Start.Before(first429) {
			first429 = r.Start
		}
		if r.Start.After(last429) {
			last429 = r.Start
		}
	}
	if first429.IsZero() {
		t.Fatalf("no 429 at twice the limit: %s", summarize(rs))
	}
	// At a refusal the bucket is empty: between two refusals what is served is
	// exactly what the bucket refilled meanwhile (to a token at each end).
	inWindow := 0
	for _, r := range rs {
		if r.Code == http.StatusOK && !r.Start.Before(first429) && r.Start.Before(last429) {
			inWindow++
		}
	}
	window := last429.Sub(first429)
	rate := float64(inWindow) / window.Seconds()
	t.Logf("at 200 rps offered: first 429 after %s; %d served in the %s to the last: %.2f rps (limit %d)", first429.Sub(overStart).Round(time.Millisecond),
		inWindow, window.Round(time.Millisecond), rate, limitRPS)
	if window < 5*time.Second {
		t.Fatalf("only %s of overload between the first and the last 429", window)
	}
	if rate < limitRPS*0.99 || rate > limitRPS*1.01 {
		t.Errorf("served %.2f rps under overload, want %d ± 1%%", rate, limitRPS)
	}
	// The upstream saw only what was served, and /metrics count exactly what
	// the client saw (the probes' 200s and their one 429 included).
	codes := summarize(under.Since(underStart)).codes
	for code, n := range summarize(rs).codes {
		codes[code] += n
	}
	served, refused := codes[http.StatusOK]+probesServed, codes[http.StatusTooManyRequests]+1
	if got := ups[0].stats().hits(underStart, time.Time{}); got != served {
		t.Errorf("upstream saw %d requests, the client was served %d", got, served)
	}
	if allowed, rejected, dry := rateMetrics(t, sc); allowed != float64(served) || rejected != float64(refused) || dry != 0 {
		t.Errorf("/metrics: allowed %v, rejected %v, dry-run rejected %v; the client was served %d and refused %d", allowed, rejected, dry, served, refused)
	}

	// dryRun through pilot: the same overload is served, and counted.
	rev := p.ApplyRev(yaml + policy(true))
	testkit.Eventually(t, 30*time.Second, fmt.Sprintf("revision %d active", rev), func() bool { return sc.ConfigDump().Revision >= rev })
	_, rejectedBefore, _ := rateMetrics(t, sc)
	dryStart := time.Now()
	dry := drillkit.StartRate(t, sc.W, host, 2*limitRPS)
	testkit.Eventually(t, 30*time.Second, "2s of load at 200 rps in dry run", func() bool { return time.Since(dryStart) >= 2*time.Second })
	dry.Stop()
	if s := summarize(dry.Since(dryStart)); s.ok != s.n {
		t.Errorf("dry run refused: %s", s)
	}
	_, rejectedAfter, wouldReject := rateMetrics(t, sc)
	if rejectedAfter != rejectedBefore || wouldReject < 100 {
		t.Errorf("dry run: rejected %v → %v, would-be rejections %v (want unchanged, and about 200)", rejectedBefore, rejectedAfter, wouldReject)
	}
}

// rateMetrics reads reviews' allowed, rejected and dry-run rejected counters.
func rateMetrics(t *testing.T, sc *drillkit.Sidecar) (allowed, rejected, dry float64) {
	t.Helper()
	read := func(name string) float64 {
		prefix := name + `{service="` + reviewsKey + `"} `
		lines := sc.MetricLines(prefix)
		if len(lines) != 1 {
			t.Fatalf("/metrics has %d lines of %s for %s, want 1", len(lines), name, reviewsKey)
		}
		v, err := strconv.ParseFloat(strings.TrimPrefix(lines[0], prefix), 64)
		if err != nil {
			t.Fatalf("%s: %v", lines[0], err)
		}
		return v
	}
	return read("weft_sidecar_ratelimit_allowed_total"), read("weft_sidecar_ratelimit_rejected_total"), read("weft_sidecar_ratelimit_dry_run_rejected_total")
}
