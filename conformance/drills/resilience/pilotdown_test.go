package resilience

import (
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/weft-mesh/weft/conformance/internal/drillkit"
	"github.com/weft-mesh/weft/sidecar/runtime"
	"github.com/weft-mesh/weft/tools/testkit"
)

func classAge(sc *drillkit.Sidecar, class string) float64 {
	for _, s := range sc.ConfigDump().Staleness {
		if s.Class == class {
			return s.AgeSeconds
		}
	}
	sc.T.Fatalf("no staleness for %s in config_dump", class)
	return 0
}

// Drill (a): pilot killed while a load generator sends requests through the
// sidecar: zero failed requests, and the staleness age grows in /config_dump.
func TestDrillPilotKilledUnderLoad(t *testing.T) {
	for i, kind := range drillkit.ControlPlanes {
		t.Run(kind, func(t *testing.T) {
			w, cp := drillkit.Setup(t, kind, fmt.Sprintf("127.77.1%d", i))
			sc := drillkit.StartSidecar(t, w, cp.Addr())
			sc.WaitReady(10 * time.Second)

			loadStart := time.Now()
			lg := drillkit.StartRate(t, w, "reviews:9080", 200)
			testkit.Eventually(t, 10*time.Second, "100 requests answered before the kill", func() bool { return len(lg.Since(loadStart)) >= 100 })
			cp.Down()
			killed := time.Now()
			testkit.Eventually(t, 5*time.Second, "xDS stream noticed down", func() bool { return !sc.ConfigDump().XDS.Connected })
			age1 := classAge(sc, "routes")
			var age2 float64
			testkit.Eventually(t, 10*time.Second, "the routes' staleness age grows by 1s", func() bool {
				age2 = classAge(sc, "routes")
				return age2 >= age1+1 // ages are sampled at 1s ticks
			})
			lg.Stop()
			loadFor := time.Since(loadStart)

			rs := lg.Since(loadStart)
			failed := 0
			first := ""
			for _, r := range rs {
				if !r.OK() || r.Body != "v1 /drill" {
					if failed++; first == "" {
						first = fmt.Sprintf("code %d body %q err %v", r.Code, r.Body, r.Err)
					}
				}
			}
			t.Logf("%s: %d requests at 200/s, %d failed; routes age %.1fs then %.1fs; pilot killed %.1fs before",
				kind, len(rs), failed, age1, age2, time.Since(killed).Seconds())
			if failed != 0 {
				t.Fatalf("%d of %d requests failed, first: %s", failed, len(rs), first)
			}
			if want := int(loadFor.Seconds() * 200 * 0.9); len(rs) < want {
				t.Fatalf("only %d requests sent in %s, want at least %d", len(rs), loadFor, want)
			}
			if code, body := sc.Ready(); code != http.StatusOK {
				t.Fatalf("not ready while serving stale within bounds: %d %q", code, body)
			}
		})
	}
}

// Drill (b): the sidecar restarted while pilot is down is ready within 1s from the
// signed snapshot and serves the same routes.
func TestDrillRestartWithoutPilot(t *testing.T) {
	for i, kind := range drillkit.ControlPlanes {
		t.Run(kind, func(t *testing.T) {
			w, cp := drillkit.Setup(t, kind, fmt.Sprintf("127.77.2%d", i))
			sc := drillkit.StartSidecar(t, w, cp.Addr())
			sc.WaitReady(10 * time.Second)
			code, before, _, err := drillkit.Get(drillkit.Client, w, "reviews:9080", "/same")
			if err != nil || code != http.StatusOK {
				t.Fatalf("before: %d %v", code, err)
			}
			rev := sc.ConfigDump().Revision
			testkit.Eventually(t, 5*time.Second, "last-known-good saved", func() bool { return !sc.ConfigDump().LastKnownGood.SavedAt.IsZero() })
			sc.Terminate()
			cp.Down()

			sc = drillkit.StartSidecar(t, w, cp.Addr())
			took := sc.WaitReady(time.Second)
			t.Logf("%s: ready %s after start with pilot down", kind, took.Round(time.Millisecond))
			code, after, _, err := drillkit.Get(drillkit.Client, w, "reviews:9080", "/same")
			if err != nil || code != http.StatusOK || after != before {
				t.Fatalf("after restart: %d %q %v, before: %q", code, after, err, before)
			}
			cd := sc.ConfigDump()
			if cd.Active == nil || cd.Active.Source != runtime.SourceLKG || cd.Revision != rev {
				t.Fatalf("active = %+v, revision %d want %d", cd.Active, cd.Revision, rev)
			}
		})
	}
}

// Drill (e): routing expiry reached (short expireAfter) answers 503 with the
// reason header; service resumes when pilot returns.
func TestDrillRoutingExpiry(t *testing.T) {
	for i, kind := range drillkit.ControlPlanes {
		t.Run(kind, func(t *testing.T) {
			w, cp := drillkit.Setup(t, kind, fmt.Sprintf("127.77.5%d", i))
			sc := drillkit.StartSidecar(t, w, cp.Addr(), "--staleness", "routes=500ms/2s/failClosed")
			sc.WaitReady(10 * time.Second)
			expireAndResume(t, w, sc, cp)
		})
	}
}

// stalenessPolicyYAML: routes expire 2s after the last confirmation, without
// jitter, for the drill's sidecar (app=productpage).
const stalenessPolicyYAML = `apiVersion: mesh.weft.dev/v1alpha1
kind: StalenessPolicy
metadata: {name: productpage-fast, namespace: shop}
spec:
  selector: {app: productpage}
  rules:
  - {resource: routes, warnAfter: 500ms, expireAfter: 2s, onExpire: failClosed, jitter: 0}
`

// Drill (e), delivered: the same expiry with no sidecar flag, in both xDS modes. A
// StalenessPolicy applied with meshctl reaches the sidecar over ADS (config_dump
// shows it as pilot's); pilot killed, the sidecar answers 503 x-weft-degraded
// after that bound, and resumes when pilot returns.
func TestDrillRoutingExpiryDeliveredPolicy(t *testing.T) {
	for i, mode := range []string{"sotw", "delta"} {
		t.Run(mode, func(t *testing.T) {
			w, cp := drillkit.Setup(t, "pilot", fmt.Sprintf("127.77.7%d", i))
			cp.(*drillkit.PilotProc).ApplyYAML(stalenessPolicyYAML)
			sc := drillkit.StartSidecar(t, w, cp.Addr(), "--xds-mode", mode)
			sc.WaitReady(10 * time.Second)
			var routes runtime.PolicyInfo
			testkit.Eventually(t, 10*time.Second, "pilot's routes policy in config_dump", func() bool {
				for _, s := range sc.ConfigDump().Staleness {
					if s.Class == "routes" {
						routes = s.Policy
					}
				}
				return routes.Source == runtime.PolicyPilot
			})
			want := runtime.PolicyInfo{Source: runtime.PolicyPilot, From: "shop/productpage-fast", WarnAfter: "500ms", ExpireAfter: "2s", OnExpire: "failClosed"}
			if routes != want {
				t.Fatalf("routes policy %+v, want %+v", routes, want)
			}
			if code, body, _, err := drillkit.Get(drillkit.Client, w, "reviews:9080", "/"); err != nil || code != http.StatusOK || body != "v1 /" {
				t.Fatalf("before: %d %q %v", code, body, err)
			}
			expireAndResume(t, w, sc, cp)
		})
	}
}

// expireAndResume kills the control plane, waits for routing to fail closed
// (503 with x-weft-degraded naming the routes' expireAfter of 2s, not ready),
// then restarts it and waits for service and readiness to come back.
func expireAndResume(t *testing.T, w drillkit.Workload, sc *drillkit.Sidecar, cp drillkit.ControlPlane) {
	t.Helper()
	cp.Down()
	killed := time.Now()
	var hdr string
	testkit.Eventually(t, 10*time.Second, "503 with x-weft-degraded", func() bool {
		code, _, h, err := drillkit.Get(drillkit.Client, w, "reviews:9080", "/")
		if err != nil || code != http.StatusServiceUnavailable {
			return false
		}
		hdr = h.Get("x-weft-degraded")
		return true
	})
	// The age counts from the last confirmation (at or before the kill).
	if !strings.HasPrefix(hdr, "routes expired (age ") || !strings.HasSuffix(hdr, " > expireAfter 2s)") {
		t.Fatalf("x-weft-degraded = %q", hdr)
	}
	if code, body := sc.Ready(); code != http.StatusServiceUnavailable || !strings.HasPrefix(body, "routing fails closed: routes expired") {
		t.Fatalf("readiness while expired = %d %q", code, body)
	}
	t.Logf("expired %s after the control plane was killed: %s", time.Since(killed).Round(time.Millisecond), hdr)

	cp.Up()
	start := time.Now()
	testkit.Eventually(t, 40*time.Second, "service resumes after pilot returns", func() bool {
		code, body, _, err := drillkit.Get(drillkit.Client, w, "reviews:9080", "/")
		return err == nil && code == http.StatusOK && body == "v1 /"
	})
	t.Logf("service resumed %s after the control plane returned", time.Since(start).Round(time.Millisecond))
	if code, body := sc.Ready(); code != http.StatusOK {
		t.Fatalf("readiness after recovery = %d %q", code, body)
	}
}
