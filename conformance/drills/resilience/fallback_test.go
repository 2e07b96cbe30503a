package resilience

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/weft-mesh/weft/conformance/internal/drillkit"
	"github.com/weft-mesh/weft/tools/testkit"
)

// Drill (b), issue #8: every upstream of a Service fails. Ejection stops at the
// panic threshold (minHealthPercent 50: with one host of three healthy the
// picker ignores ejections), so the sidecar keeps sending to all three, and
// the Route's fallback Service answers each request, with the priority that
// answered in x-weft-priority (0 the route's own destinations, 1 the first
// fallback). The panic shows in /metrics.
func TestDrillAllFailFallback(t *testing.T) {
	const base = "127.81.2"
	ups := startUpstreams(t, base, "reviews-a", "reviews-b", "reviews-c", "backup")
	primary, backup := ups[:3], ups[3]
	yaml := svcYAML("reviews", primary...) + "---\n" + svcYAML("reviews-backup", backup) +
		routeYAML("reviews", retry5xx+`fallback: [{destination: {service: reviews-backup, port: 9080}}]
`) +
		policyYAML("reviews", `outlierDetection:
  consecutive5xx: 3
  interval: 1s
  baseEjectionTime: 30s
  maxEjectionPercent: 100
  minHealthPercent: 50
`)
	_, sc := meshUp(t, base, yaml)
	loadStart := time.Now()
	lg := drillkit.StartRate(t, sc.W, "reviews:9080", 200)
	testkit.Eventually(t, 20*time.Second, "every primary upstream serving", func() bool {
		for _, u := range primary {
			if u.stats().hits(loadStart, time.Time{}) == 0 {
				return false
			}
		}
		return true
	})
	failAt := time.Now()
	for _, u := range primary {
		u.set(up503)
	}
	// Settled: a second in which the fallback answered everything.
	var settled time.Time
	testkit.Wait(t, 20*time.Second, func() error {
		rs := lg.Since(time.Now().Add(-time.Second))
		if len(rs) < 100 || rs[0].Start.Before(failAt) {
			return fmt.Errorf("less than a second of load since the primaries failed")
		}
		for _, r := range rs {
			if !r.OK() || r.Upstream != backup.name {
				return fmt.Errorf("not every answer of the last second from the fallback: %s", summarize(rs))
			}
		}
		settled = rs[0].Start
		return nil
	})
	// Two more seconds of it, then the window is judged whole.
	testkit.Eventually(t, 20*time.Second, "two seconds more of load", func() bool { return time.Since(settled) > 3*time.Second })
	end := time.Now()
	lg.Stop()

	before := lg.Since(loadStart)
	s := summarize(lg.Since(settled))
	t.Logf("all primaries failing from %s; fallback answering everything %s later; since then: %s",
		failAt.Format("15:04:05.000"), settled.Sub(failAt).Round(time.Millisecond), s)
	if s.rate() < 0.999 || s.byUpstream[backup.name] != s.ok {
		t.Errorf("with every primary failing, want the fallback to answer: %s; first failure %s", s, s.firstErr)
	}
	prio := map[string]int{}
	for _, r := range lg.Since(settled) {
		prio[r.Priority]++
	}
	if prio["1"] != s.n {
		t.Errorf("x-weft-priority of fallback answers: %v, want all \"1\"", prio)
	}
	// Every answer of the whole load names who answered: 0 a primary, 1 the fallback.
	prio = map[string]int{}
	for _, r := range before {
		if r.OK() {
			prio[r.Upstream+"="+r.Priority]++
		}
	}
	for k, n := range prio {
		if up, p, _ := strings.Cut(k, "="); (up == backup.name) != (p == "1") || (up != backup.name && p != "0") {
			t.Errorf("%d answers from %s with x-weft-priority %q", n, up, p)
		}
	}
	if n := prio[primary[0].name+"=0"] + prio[primary[1].name+"=0"] + prio[primary[2].name+"=0"]; n == 0 {
		t.Errorf("no answer from a primary before they failed: %v", prio)
	}
	// Panic mode: every primary still gets requests (none is left out as ejected).
	for _, u := range primary {
		n := u.stats().hits(settled, end)
		t.Logf("%s: %d requests while failing and in panic", u.name, n)
		if n == 0 {
			t.Errorf("%s got no request in panic mode", u.name)
		}
	}
	panicked := false
	for _, l := range sc.MetricLines("weft_sidecar_outlier_panic") {
		if strings.Contains(l, "reviews") && !strings.HasSuffix(l, " 0") {
			panicked = true
		}
	}
	if !panicked {
		t.Errorf("no panic for reviews in /metrics: %q", sc.MetricLines("weft_sidecar_outlier"))
	}
}
