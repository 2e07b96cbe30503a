package resilience

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/weft-mesh/weft/bootstrap/leds"
	"github.com/weft-mesh/weft/conformance/internal/drillkit"
	"github.com/weft-mesh/weft/tools/meshctl"
	"github.com/weft-mesh/weft/tools/testkit"
)

// The ejection drills' outlier detection: consecutive 5xx at 5, one-second
// interval, ejected for 3s; one host of three may be ejected.
const (
	ejectInterval = time.Second
	ejectBase     = 3 * time.Second
	ejectRate     = 300 // requests per second of the load
)

var ejectPolicy = fmt.Sprintf(`loadBalancer: ROUND_ROBIN
outlierDetection:
  consecutive5xx: 5
  interval: %s
  baseEjectionTime: %s
  maxEjectionTime: 30s
  maxEjectionPercent: 34
`, ejectInterval, ejectBase)

// Retries on 5xx route a failed attempt around the failing host.
const retry5xx = `retries: {attempts: 2, retryOn: [5xx]}
`

// Drill (a), issue #8: one of three upstreams starts answering 503. It is ejected
// within one interval (its last request comes less than an interval after it
// began failing), its share falls to zero while ejected even once it is healthy
// again, the client sees at least 99.9% success from then on (retries on 5xx take
// the failed attempts elsewhere), it gets traffic again after the ejection time,
// and the sidecar's /outliers and pilot's `meshctl outliers` name it.
func TestDrillOutlierEjected(t *testing.T) {
	ejectionDrill(t, "127.81.1", false)
}

// Drill (a) on a delta stream, where the endpoints are LEDS resources pushed
// one by one (issue #11); the drills' sidecars speak SotW otherwise, where
// pilot sends the whole LbEndpoint set wrapped.
func TestDrillOutlierEjectedDelta(t *testing.T) {
	ejectionDrill(t, "127.81.7", false, "--xds-mode", "delta")
}

// Drill (e), issue #8: pilot is killed (SIGKILL), then an upstream fails: the
// sidecar ejects it all the same, from its last configuration, on its own
// observations.
func TestDrillOutlierEjectedPilotDown(t *testing.T) {
	ejectionDrill(t, "127.81.5", true)
}

func ejectionDrill(t *testing.T, base string, killPilot bool, sidecarFlags ...string) {
	ups := startUpstreams(t, base, "reviews-a", "reviews-b", "reviews-c")
	bad := ups[1]
	p, sc := meshUp(t, base, svcYAML("reviews", ups...)+routeYAML("reviews", retry5xx)+policyYAML("reviews", ejectPolicy), sidecarFlags...)
	// The sidecar takes endpoints incrementally (LEDS, issue #11): the three
	// upstreams are LbEndpoint resources it merged into the assignment.
	if cd := sc.ConfigDump(); cd.Active.Resources[leds.TypeURL] != len(ups) {
		t.Fatalf("the sidecar (%s) holds %d LbEndpoints, want %d (one per upstream)", cd.XDS.Mode, cd.Active.Resources[leds.TypeURL], len(ups))
	}
	loadStart := time.Now()
	lg := drillkit.StartRate(t, sc.W, "reviews:9080", ejectRate)
	testkit.Eventually(t, 20*time.Second, "every upstream serving", func() bool {
		for _, u := range ups {
			if u.stats().hits(loadStart, time.Time{}) == 0 {
				return false
			}
		}
		return true
	})
	if killPilot {
		p.Down()
		testkit.Eventually(t, 10*time.Second, "sidecar sees pilot gone", func() bool { return !sc.ConfigDump().XDS.Connected })
	}

	failAt := time.Now()
	bad.set(up503)
	// Ejected: the bad upstream gets nothing for a while (at ejectRate/3 per
	// second a healthy one gets a request every few milliseconds).
	const quiet = 500 * time.Millisecond
	testkit.Wait(t, 20*time.Second, func() error {
		st := bad.stats()
		if last := st.last(); !last.After(failAt) || time.Since(last) <= quiet {
			return fmt.Errorf("the failing %s still gets requests: %d since it began failing, the last %s ago",
				bad.name, st.hits(failAt, time.Time{}), time.Since(last).Round(time.Millisecond))
		}
		return nil
	})
	lastFail := bad.stats().lastIn(up503)
	failing := bad.stats().hits(failAt, time.Time{})
	t.Logf("%s failed %d requests over %s, then none", bad.name, failing, lastFail.Sub(failAt).Round(time.Millisecond))
	if took := lastFail.Sub(failAt); took > ejectInterval {
		t.Errorf("failing upstream still sent requests %s after it began failing, want ejection within one interval (%s)", took, ejectInterval)
	}
	// Healthy again at once: while the ejection lasts it still gets nothing.
	bad.set(upOK)
	healedAt := time.Now()

	// The sidecar explains the ejection.
	ejected, body, err := sc.Ejected(bad.addr())
	if err != nil || !ejected {
		t.Errorf("sidecar /outliers does not list %s as ejected (%v): %s", bad.addr(), err, body)
	} else {
		var c bytes.Buffer
		if json.Compact(&c, []byte(body)) == nil {
			body = c.String()
		}
		t.Logf("sidecar /outliers: %s", body)
	}
	if !killPilot {
		// Pilot aggregates the sidecars' reports: one client of one ejects it.
		var out string
		testkit.Wait(t, 15*time.Second, func() error {
			var o, e strings.Builder
			if code := meshctl.Run(context.Background(), []string{"--pilot", p.URL(), "outliers"}, &o, &e); code != 0 {
				return fmt.Errorf("meshctl outliers: exit %d: %s %s", code, o.String(), e.String())
			}
			if out = o.String(); !strings.Contains(out, bad.addr()) {
				return fmt.Errorf("meshctl outliers does not name %s:\n%s", bad.addr(), out)
			}
			return nil
		})
		t.Logf("meshctl outliers:\n%s", out)
		// Its row: endpoint, service key, ejected by 1 of 1 reporting clients.
		row := ""
		for _, l := range strings.Split(out, "\n") {
			if strings.HasPrefix(l, bad.addr()+" ") {
				row = l
			}
		}
		if f := strings.Fields(row); len(f) < 3 || f[1] != "outbound|9080||reviews.shop.svc.cluster.local" || f[2] != "1/1" {
			t.Errorf("meshctl outliers does not say 1/1 clients eject %s from reviews:\n%s", bad.addr(), out)
		}
	}

	// It returns after the ejection time (un-ejection is checked at the
	// interval's ticks: within base + interval, plus slack for a loaded machine).
	var back time.Time
	testkit.Eventually(t, ejectBase+ejectInterval+15*time.Second, "the upstream back in rotation", func() bool {
		back = bad.stats().firstAfter(lastFail)
		return !back.IsZero()
	})
	// Back in rotation: it serves its share again.
	testkit.Eventually(t, 20*time.Second, "the returned upstream serving its share", func() bool {
		return summarize(lg.Since(back)).byUpstream[bad.name] >= 20
	})
	lg.Stop()
	gap := back.Sub(lastFail)
	t.Logf("%s back %s after its last failed request (healthy %s before that)", bad.name, gap.Round(time.Millisecond), back.Sub(healedAt).Round(time.Millisecond))
	// The ejection began at or before the last failed request arrived (requests
	// picked before it were still in flight): allow their lag.
	const inFlightLag = 250 * time.Millisecond
	if gap < ejectBase-inFlightLag {
		t.Errorf("ejected upstream got a request %s after its last failure, before the ejection time %s", gap, ejectBase)
	}
	if gap > ejectBase+ejectInterval+5*time.Second {
		t.Errorf("ejected upstream back only %s after its last failure, ejection time %s, interval %s", gap, ejectBase, ejectInterval)
	}

	// The ejection and the return are events in the sidecar's log, naming the host.
	logged := func(event string) string {
		for _, l := range strings.Split(sc.Logs.String(), "\n") {
			if strings.Contains(l, event) && strings.Contains(l, "host="+bad.addr()) {
				return l
			}
		}
		return ""
	}
	testkit.Eventually(t, 10*time.Second, "ejection and return in the sidecar's log", func() bool {
		return logged("host ejected") != "" && logged("host returned") != ""
	})
	t.Logf("sidecar log:\n%s\n%s", logged("host ejected"), logged("host returned"))
	// And in /metrics: one ejection by consecutive5xx, one return.
	if e, r := sc.Metric(`weft_sidecar_outlier_ejections_total{detector="consecutive5xx"}`), sc.Metric("weft_sidecar_outlier_returns_total"); e != 1 || r != 1 {
		t.Errorf("/metrics: %v ejections by consecutive5xx, %v returns; want 1 and 1", e, r)
	}

	all := summarize(lg.Since(loadStart))
	after := summarize(lg.Since(lastFail))
	t.Logf("whole load: %s", all)
	t.Logf("from the ejection on: %s", after)
	if after.n < ejectRate { // about ejectBase seconds of load
		t.Errorf("only %d requests after the ejection", after.n)
	}
	if after.rate() < 0.999 {
		t.Errorf("success after the ejection %.3f%% < 99.9%%: first failure %s", 100*after.rate(), after.firstErr)
	}
}
