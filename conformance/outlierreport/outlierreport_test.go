// Package outlierreport runs the outlier reports end to end with real
// processes: bin/pilot and bin/sidecar built as `make build` builds them, and
// upstream applications on loopback, one failing. The sidecars eject it and
// report over their ADS connections; pilot's aggregate and meshctl outliers
// show that both eject it, and a sidecar's entries vanish when it stops.
package outlierreport

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/weft-mesh/weft/pilot/status/outlieragg"
	"github.com/weft-mesh/weft/tools/meshctl"
	"github.com/weft-mesh/weft/tools/testkit"
	"github.com/weft-mesh/weft/tools/testkit/proc"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m, goleak.Cleanup(proc.Cleanup)) }

// Loopback addresses of this package's processes (other packages use others).
const (
	pilotIP = "127.86.6.1"
	mesh    = `apiVersion: mesh.weft.dev/v1alpha1
kind: Service
metadata: {name: reviews, namespace: shop}
spec:
  selector: {app: reviews}
  ports: [{name: http, port: 9080, targetPort: 8080, protocol: HTTP}]
---
apiVersion: mesh.weft.dev/v1alpha1
kind: DestinationPolicy
metadata: {name: reviews, namespace: shop}
spec:
  service: reviews
  outlierDetection: {consecutive5xx: 3, interval: 1s, baseEjectionTime: 120s, maxEjectionPercent: 50}
---
apiVersion: mesh.weft.dev/v1alpha1
kind: Workload
metadata: {name: reviews-1, namespace: shop, labels: {app: reviews}}
spec: {address: 127.86.6.10}
---
apiVersion: mesh.weft.dev/v1alpha1
kind: Workload
metadata: {name: reviews-2, namespace: shop, labels: {app: reviews}}
spec: {address: 127.86.6.11}
---
apiVersion: mesh.weft.dev/v1alpha1
kind: Workload
metadata: {name: reviews-3, namespace: shop, labels: {app: reviews}}
spec: {address: 127.86.6.12}
`
	failing = "127.86.6.12:8080"
)

var hc = &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{DisableKeepAlives: true}}

func getBody(url string) (string, error) {
	resp, err := hc.Get(url)
	if err != nil {
		return "", err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if resp.StatusCode != http.StatusOK {
		return "", fmt.Errorf("GET %s: %s", url, resp.Status)
	}
	return string(b), err
}

func startSidecar(t *testing.T, p *proc.PilotProcess, id, ip string) *proc.Proc {
	t.Helper()
	return proc.Start(t, "sidecar "+id, proc.Build(t, proc.Sidecar), "--node-id", id, "--namespace", "shop",
		"--service-account", "productpage", "--labels", "app=productpage", "--address", ip, "--pilot", p.XDSAddr(),
		"--publisher-key", p.KeyFile(), "--state-dir", filepath.Join(t.TempDir(), "state"),
		"--admin-addr", ip+":15000", "--outbound-addr", ip+":15001", "--inbound-addr", ip+":15006", "--ready-addr", ip+":15021")
}

func outliers(t *testing.T, p *proc.PilotProcess) (outlieragg.View, error) {
	b, err := getBody(p.URL() + "/apis/status/v1/outliers")
	if err != nil {
		return outlieragg.View{}, err
	}
	var v outlieragg.View
	return v, json.Unmarshal([]byte(b), &v)
}

var sentRe = regexp.MustCompile(`(?m)^weft_sidecar_outlier_reports_total\{result="sent"\} (\d+)$`)

// startApps serves the three reviews workloads on loopback; failing answers 503.
func startApps(t *testing.T) {
	t.Helper()
	for _, ip := range []string{"127.86.6.10", "127.86.6.11", "127.86.6.12"} {
		addr := ip + ":8080"
		lis, err := net.Listen("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		srv := &http.Server{ReadHeaderTimeout: 5 * time.Second, Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if addr == failing {
				w.WriteHeader(http.StatusServiceUnavailable)
			}
			fmt.Fprintln(w, addr)
		})}
		done := make(chan struct{})
		go func() { defer close(done); _ = srv.Serve(lis) }()
		t.Cleanup(func() { srv.Close(); <-done })
	}
}

// send sends n requests to reviews through the sidecar at ip and returns how
// many got 503.
func send(t *testing.T, ip string, n int) int {
	t.Helper()
	failed := 0
	for range n {
		req, err := http.NewRequest(http.MethodGet, "http://"+ip+":15001/", nil)
		if err != nil {
			t.Fatal(err)
		}
		req.Host = "reviews:9080"
		resp, err := hc.Do(req)
		if err != nil {
			t.Fatalf("request through %s: %v", ip, err)
		}
		_, _ = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		if resp.StatusCode == http.StatusServiceUnavailable {
			failed++
		}
	}
	return failed
}

func waitReady(t *testing.T, s *proc.Proc, ip string) {
	t.Helper()
	testkit.Wait(t, 30*time.Second, func() error {
		select {
		case <-s.Exited():
			t.Fatalf("sidecar %s exited:\n%s", ip, s.Logs.String())
		default:
		}
		_, err := getBody("http://" + ip + ":15021/healthz/ready")
		return err
	})
}

func meshctlOutliers(t *testing.T, p *proc.PilotProcess) (int, string, string) {
	t.Helper()
	var out, errb strings.Builder
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	code := meshctl.Run(ctx, []string{"--pilot", p.URL(), "outliers"}, &out, &errb)
	return code, out.String(), errb.String()
}

// Two sidecars send traffic to three upstreams, one failing: both eject it, and
// pilot (GET /apis/status/v1/outliers, meshctl outliers) says 2 of 2 clients
// eject it. A stopped sidecar's entries vanish at once, not at the TTL.
func TestSidecarsReportToPilot(t *testing.T) {
	startApps(t)
	p := proc.StartPilot(t, pilotIP, t.TempDir())
	p.Apply(t, mesh)
	ips := []string{"127.86.6.2", "127.86.6.3"}
	a := startSidecar(t, p, "productpage-a", ips[0])
	b := startSidecar(t, p, "productpage-b", ips[1])
	waitReady(t, a, ips[0])
	waitReady(t, b, ips[1])
	// Before any traffic, both report (nothing ejected): pilot counts them.
	testkit.Wait(t, 30*time.Second, func() error {
		v, err := outliers(t, p)
		if err != nil {
			return err
		}
		if v.Reporters != 2 || len(v.Endpoints) != 0 {
			return fmt.Errorf("pilot: %d reporting proxies, %d endpoints; want 2 and 0", v.Reporters, len(v.Endpoints))
		}
		return nil
	})
	for _, ip := range ips {
		if f := send(t, ip, 30); f == 0 {
			t.Errorf("%s: no request reached the failing upstream", ip)
		}
	}
	var v outlieragg.View
	sentAt := time.Now()
	testkit.Wait(t, 30*time.Second, func() error {
		var err error
		if v, err = outliers(t, p); err != nil {
			return err
		}
		if len(v.Endpoints) != 1 || v.Endpoints[0].Endpoint != failing || v.Endpoints[0].EjectedBy != 2 || v.Endpoints[0].Clients != 2 {
			return fmt.Errorf("pilot's view: %+v; want %s ejected by 2 of 2", v, failing)
		}
		return nil
	})
	t.Logf("pilot showed the ejection by both sidecars %v after their traffic ended", time.Since(sentAt).Round(10*time.Millisecond))
	if ep := v.Endpoints[0]; ep.Service != "outbound|9080||reviews.shop.svc.cluster.local" || ep.Detectors["consecutive5xx"] != 2 {
		t.Errorf("endpoint: %+v", ep)
	}
	// Ejected: no more 503s (the other two answer).
	for _, ip := range ips {
		if f := send(t, ip, 20); f != 0 {
			t.Errorf("%s: %d of 20 requests still reached the ejected upstream", ip, f)
		}
	}
	code, out, errOut := meshctlOutliers(t, p)
	row := regexp.MustCompile(`(?m)^127\.86\.6\.12:8080 +outbound\|9080\|\|reviews\.shop\.svc\.cluster\.local +2/2 +consecutive5xx=2 +\d+s$`)
	if code != 0 || !row.MatchString(out) {
		t.Errorf("meshctl outliers: exit %d, stderr %q:\n%s", code, errOut, out)
	}
	t.Logf("meshctl outliers:\n%s", out)
	// The sidecar counts what it sent; pilot what it accepted.
	m, err := getBody("http://" + ips[0] + ":15000/metrics")
	if err != nil {
		t.Fatal(err)
	}
	if sm := sentRe.FindStringSubmatch(m); sm == nil || sm[1] == "0" {
		t.Errorf("sidecar metrics: no report sent:\n%s", grep(m, "outlier_reports"))
	}
	pm, err := getBody(p.URL() + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	if !regexp.MustCompile(`weft_pilot_outlier_reports_total\{result="accepted"\} [1-9]`).MatchString(pm) {
		t.Errorf("pilot metrics: no report accepted:\n%s", grep(pm, "outlier"))
	}

	// One sidecar stops: its stream ends and pilot forgets its report at once.
	if err := b.Stop(b.Grace); err != nil {
		t.Logf("stopping sidecar b: %v", err)
	}
	testkit.Wait(t, 10*time.Second, func() error {
		v, err := outliers(t, p)
		if err != nil {
			return err
		}
		if v.Reporters != 1 || len(v.Endpoints) != 1 || v.Endpoints[0].EjectedBy != 1 || v.Endpoints[0].Clients != 1 {
			return fmt.Errorf("after b stopped: %+v", v)
		}
		return nil
	})
	if code, out, _ := meshctlOutliers(t, p); code != 0 || !strings.Contains(out, " 1/1 ") {
		t.Errorf("meshctl outliers after b stopped: exit %d:\n%s", code, out)
	}
}

func grep(s, sub string) string {
	var out []string
	for _, l := range strings.Split(s, "\n") {
		if strings.Contains(l, sub) {
			out = append(out, l)
		}
	}
	return strings.Join(out, "\n") + "\n(" + strconv.Itoa(len(out)) + " lines)"
}
