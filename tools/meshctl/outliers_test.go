package meshctl_test

import (
	"context"
	"encoding/json"
	"fmt"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/weft-mesh/weft/bootstrap/node/envoynode"
	"github.com/weft-mesh/weft/internal/outlierreport"
	"github.com/weft-mesh/weft/pilot/server/servertest"
	"github.com/weft-mesh/weft/pilot/status/outlieragg"
	"github.com/weft-mesh/weft/tools/meshctl"
)

const reviewsKey = "outbound|9080||reviews.shop.svc.cluster.local"

func report(t *testing.T, c *servertest.Client, id string, total uint32, es ...outlierreport.Entry) {
	t.Helper()
	r := outlierreport.Report{Node: id, Total: max(total, uint32(len(es))), Entries: es}
	b, err := outlierreport.Encode(&r)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := outlierreport.Send(ctx, c.Conn(), b); err != nil {
		t.Fatalf("report of %s: %v", id, err)
	}
}

func ejection(ep string, d outlierreport.Detector, age time.Duration) outlierreport.Entry {
	return outlierreport.Entry{Service: reviewsKey, Endpoint: ep, Detector: d, Age: age, Times: 1}
}

// Five proxies report to a real pilot over their ADS connections; meshctl
// outliers shows, per endpoint, how many eject it of how many hold the service.
func TestOutliers(t *testing.T) {
	p := servertest.Start(t, servertest.Options{})
	rev := p.Apply(t, svc)
	if code, _, errOut := runX(t, p, "outliers"); code != meshctl.ExitOK || errOut != "no ejected endpoints (0 proxies reporting)\n" {
		t.Fatalf("no reports: exit %d, stderr %q", code, errOut)
	}
	var cs []*servertest.Client
	for i := range 5 {
		id := fmt.Sprintf("web-%d", i)
		cs = append(cs, servertest.Dial(t, p.XDSAddr, servertest.ClientOptions{Delta: true, Node: envoynode.ToProto(sidecarNode(id)), Types: xdsTypes}))
		waitEffective(t, p, id, rev)
	}
	for i, c := range cs {
		id := fmt.Sprintf("web-%d", i)
		switch {
		case i < 3:
			report(t, c, id, 0, ejection("10.0.0.3:9080", outlierreport.Consecutive5xx, 90*time.Second))
		case i == 3:
			report(t, c, id, 300, ejection("10.0.0.3:9080", outlierreport.SuccessRate, 5*time.Second), ejection("10.0.0.4:9080", outlierreport.Consecutive5xx, time.Second))
		default:
			report(t, c, id, 0) // reports, ejects nothing
		}
	}
	code, out, errOut := runX(t, p, "outliers")
	if code != meshctl.ExitOK {
		t.Fatalf("outliers: exit %d: %s", code, errOut)
	}
	lines := strings.Split(strings.TrimRight(out, "\n"), "\n")
	want := []*regexp.Regexp{
		regexp.MustCompile(`^ENDPOINT +SERVICE +EJECTED-BY +DETECTORS +SINCE$`),
		regexp.MustCompile(`^10\.0\.0\.3:9080 +outbound\|9080\|\|reviews\.shop\.svc\.cluster\.local +4/5 +consecutive5xx=3,successRate=1 +1m3\ds$`),
		regexp.MustCompile(`^10\.0\.0\.4:9080 +outbound\|9080\|\|reviews\.shop\.svc\.cluster\.local +1/5 +consecutive5xx=1 +\ds$`),
		regexp.MustCompile(`^web-3: its report lists only part of its 300 ejections$`),
	}
	if len(lines) != len(want) {
		t.Fatalf("outliers printed %d lines, want %d:\n%s", len(lines), len(want), out)
	}
	for i, re := range want {
		if !re.MatchString(lines[i]) {
			t.Errorf("line %d %q does not match %s", i, lines[i], re)
		}
	}
	code, out, _ = runX(t, p, "outliers", "-o", "json")
	var v outlieragg.View
	if code != meshctl.ExitOK || json.Unmarshal([]byte(out), &v) != nil || v.Reporters != 5 || v.Endpoints[0].EjectedBy != 4 {
		t.Errorf("-o json: exit %d, %s", code, out)
	}
	for _, args := range [][]string{{"outliers", "extra"}, {"outliers", "-o", "yaml"}} {
		if code, _, errOut := runX(t, p, args...); code != meshctl.ExitOther || errOut == "" {
			t.Errorf("%q: exit %d, stderr %q", args, code, errOut)
		}
	}
}
