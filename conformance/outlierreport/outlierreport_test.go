// Package outlierreport runs the outlier reports end to end with real
// processes: bin/pilot and bin/sidecar built as `make build` builds them. The
// sidecars report over their ADS connections; pilot's aggregate and meshctl
// outliers show them, and a sidecar's entries vanish when it stops.
package outlierreport

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
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
  ports:
  - {name: http, port: 9080, protocol: HTTP}
---
apiVersion: mesh.weft.dev/v1alpha1
kind: Workload
metadata: {name: reviews-1, namespace: shop, labels: {app: reviews}}
spec: {address: 127.86.6.9}
`
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

func TestSidecarsReportToPilot(t *testing.T) {
	p := proc.StartPilot(t, pilotIP, t.TempDir())
	p.Apply(t, mesh)
	a := startSidecar(t, p, "productpage-a", "127.86.6.2")
	b := startSidecar(t, p, "productpage-b", "127.86.6.3")
	testkit.Wait(t, 30*time.Second, func() error {
		for _, s := range []*proc.Proc{a, b} {
			select {
			case <-s.Exited():
				t.Fatalf("a sidecar exited:\n%s", s.Logs.String())
			default:
			}
		}
		v, err := outliers(t, p)
		if err != nil {
			return err
		}
		if v.Reporters != 2 {
			return fmt.Errorf("pilot has %d reporting proxies, want 2", v.Reporters)
		}
		return nil
	})
	// The sidecar counts what it sent.
	m, err := getBody("http://127.86.6.2:15000/metrics")
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

	// One sidecar stops: its stream ends and pilot forgets its report at once
	// (not at the TTL).
	if err := b.Stop(b.Grace); err != nil {
		t.Logf("stopping sidecar b: %v", err)
	}
	testkit.Wait(t, 10*time.Second, func() error {
		v, err := outliers(t, p)
		if err != nil {
			return err
		}
		if v.Reporters != 1 {
			return fmt.Errorf("pilot has %d reporting proxies, want 1", v.Reporters)
		}
		return nil
	})
	var out, errb strings.Builder
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if code := meshctl.Run(ctx, []string{"--pilot", p.URL(), "outliers"}, &out, &errb); code != 0 || errb.String() != "no ejected endpoints (1 proxy reporting)\n" {
		t.Errorf("meshctl outliers: exit %d, stdout %q, stderr %q", code, out.String(), errb.String())
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
