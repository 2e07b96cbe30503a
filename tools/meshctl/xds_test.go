package meshctl_test

import (
	"bytes"
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/weft-mesh/weft/bootstrap/node"
	"github.com/weft-mesh/weft/bootstrap/node/envoynode"
	"github.com/weft-mesh/weft/pilot/server/servertest"
	"github.com/weft-mesh/weft/pilot/status"
	"github.com/weft-mesh/weft/pilot/xds/snapshot"
	"github.com/weft-mesh/weft/tools/meshctl"
)

var xdsTypes = []string{snapshot.ClusterType, snapshot.EndpointType, snapshot.ListenerType, snapshot.RouteType}

func sidecarNode(id string) *node.Node {
	return &node.Node{ID: id, Namespace: "shop", ServiceAccount: "reviews", Labels: map[string]string{"app": "reviews"},
		Address: "127.0.0.5", InboundPort: 15006}
}

func runX(t *testing.T, p *servertest.Pilot, args ...string) (int, string, string) {
	t.Helper()
	var out, errb bytes.Buffer
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	code := meshctl.Run(ctx, append([]string{"--pilot", p.AdminURL}, args...), &out, &errb)
	return code, out.String(), errb.String()
}

func waitEffective(t *testing.T, p *servertest.Pilot, id string, rev int64) {
	t.Helper()
	p.WaitProxy(t, 10*time.Second, id, "effective at the revision", func(ps status.ProxyStatus) bool {
		return ps.EffectiveRevision >= rev && ps.Status == status.Synced
	})
}

// TestProxyStatusAndConfigDump: one row per proxy with each type's state and
// the effective revision; config-dump shows what pilot sent, as JSON.
func TestProxyStatusAndConfigDump(t *testing.T) {
	p := servertest.Start(t, servertest.Options{})
	rev := p.Apply(t, svc)
	servertest.Dial(t, p.XDSAddr, servertest.ClientOptions{Delta: true, Node: envoynode.ToProto(sidecarNode("reviews-1")), Types: xdsTypes})
	servertest.Dial(t, p.XDSAddr, servertest.ClientOptions{Node: envoynode.ToProto((&node.Node{ID: "stuck"})), Types: xdsTypes[:1], Silent: true})
	waitEffective(t, p, "reviews-1", rev)
	p.WaitProxy(t, 10*time.Second, "stuck", "pending", func(ps status.ProxyStatus) bool { return ps.Status == status.PendingAck })

	code, out, errOut := runX(t, p, "proxy-status")
	if code != meshctl.ExitOK {
		t.Fatalf("proxy-status exit %d: %s", code, errOut)
	}
	lines := strings.Split(strings.TrimSpace(out), "\n")
	wantLines := []*regexp.Regexp{
		regexp.MustCompile(`^NODE +CDS +EDS +LDS +RDS +MANIFEST +EFFECTIVE REV +CONNECTED +LAST SEEN$`),
		regexp.MustCompile(`^reviews-1 +SYNCED +SYNCED +SYNCED +SYNCED +- +` + itoa(rev) + ` +\d+s +\d+s ago$`),
		regexp.MustCompile(`^stuck +PENDING_ACK +- +- +- +- +0 +\d+s +\d+s ago$`),
	}
	if len(lines) != len(wantLines) {
		t.Fatalf("proxy-status printed %d lines, want %d:\n%s", len(lines), len(wantLines), out)
	}
	for i, re := range wantLines {
		if !re.MatchString(lines[i]) {
			t.Errorf("line %d %q does not match %s", i, lines[i], re)
		}
	}

	code, out, errOut = runX(t, p, "config-dump", "reviews-1")
	if code != meshctl.ExitOK {
		t.Fatalf("config-dump exit %d: %s", code, errOut)
	}
	var dump status.ConfigDump
	if err := json.Unmarshal([]byte(out), &dump); err != nil {
		t.Fatalf("config-dump is not JSON: %v\n%s", err, out)
	}
	if dump.Node != "reviews-1" || len(dump.Types) != 4 {
		t.Fatalf("config-dump node %q with %d types, want reviews-1 with 4", dump.Node, len(dump.Types))
	}
	if !strings.Contains(out, `"name": "outbound|9080||reviews.shop.svc.cluster.local"`) {
		t.Errorf("config-dump lacks the reviews cluster:\n%s", out)
	}

	tests := []struct {
		name     string
		args     []string
		wantCode int
		wantErr  string
	}{
		{"unknown node", []string{"config-dump", "nobody"}, meshctl.ExitNotFound, `meshctl: pilot answered 404: proxy "nobody": not found` + "\n"},
		{"no node", []string{"config-dump"}, meshctl.ExitOther, "meshctl: usage: meshctl config-dump NODE\n"},
		{"proxy-status args", []string{"proxy-status", "x"}, meshctl.ExitOther, "meshctl: usage: meshctl proxy-status\n"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			code, _, errOut := runX(t, p, tt.args...)
			if code != tt.wantCode || errOut != tt.wantErr {
				t.Errorf("exit %d stderr %q, want %d %q", code, errOut, tt.wantCode, tt.wantErr)
			}
		})
	}
}

// TestRolloutStatus: exit 0 once every connected proxy has the revision, 2 while
// one has not (at once without --wait, at the timeout with it), with a clear line.
func TestRolloutStatus(t *testing.T) {
	p := servertest.Start(t, servertest.Options{})
	rev := p.Apply(t, svc)
	servertest.Dial(t, p.XDSAddr, servertest.ClientOptions{Delta: true, Node: envoynode.ToProto(sidecarNode("reviews-1")), Types: xdsTypes})
	p.WaitProxy(t, 10*time.Second, "reviews-1", "connected", func(status.ProxyStatus) bool { return true })

	code, out, errOut := runX(t, p, "rollout", "status", "--wait", "--timeout", "10s")
	if code != meshctl.ExitOK {
		t.Fatalf("rollout status --wait exit %d: %s%s", code, out, errOut)
	}
	want := regexp.MustCompile(`^revision ` + itoa(rev) + `: stored \S+\neffective: 1 of 1 connected proxies \(100\.0%\)\npending: 0\nrejected: 0\n(converged \d+\.\d{3}s after the write\n)?$`)
	if !want.MatchString(out) {
		t.Errorf("rollout status output:\n%s\nwant match %s", out, want)
	}

	// A proxy that never answers keeps the next revision pending.
	servertest.Dial(t, p.XDSAddr, servertest.ClientOptions{Delta: true, Node: envoynode.ToProto((&node.Node{ID: "stuck"})), Types: xdsTypes[:1], Silent: true})
	p.WaitProxy(t, 10*time.Second, "stuck", "pending", func(ps status.ProxyStatus) bool { return ps.Status == status.PendingAck })
	rev2 := p.Apply(t, svcChanged)
	waitEffective(t, p, "reviews-1", rev2)

	tests := []struct {
		name    string
		args    []string
		code    int
		wantOut string
		wantErr string
	}{
		{"pending without wait", []string{"rollout", "status", itoa(rev2)}, meshctl.ExitOther,
			"effective: 1 of 2 connected proxies (50.0%)\npending: 1\nrejected: 0\n",
			"meshctl: revision " + itoa(rev2) + " is not effective everywhere yet (1 of 2 proxies)\n"},
		{"timeout", []string{"rollout", "status", "--wait", "--timeout", "300ms"}, meshctl.ExitOther,
			"effective: 1 of 2 connected proxies (50.0%)\npending: 1\nrejected: 0\n",
			"meshctl: timed out after 300ms waiting for revision " + itoa(rev2) + ": 1 of 2 proxies have it effective, 1 pending\n"},
		{"old revision is everywhere", []string{"rollout", "status", "0"}, meshctl.ExitOK, "effective: 2 of 2 connected proxies (100.0%)\n", ""},
		{"not built yet", []string{"rollout", "status", "999"}, meshctl.ExitOther, "revision 999: write time not known\n",
			"meshctl: pilot has not built revision 999 yet (latest built: " + itoa(rev2) + ")\n"},
		{"bad revision", []string{"rollout", "status", "x"}, meshctl.ExitOther, "", "meshctl: revision \"x\": want a non-negative integer\n"},
		{"no status word", []string{"rollout"}, meshctl.ExitOther, "", "meshctl: usage: meshctl rollout status [REV] [--wait] [--timeout D]\n"},
		{"bad timeout", []string{"rollout", "status", "--timeout", "0s"}, meshctl.ExitOther, "", "meshctl: --timeout 0s must be positive\n"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			code, out, errOut := runX(t, p, tt.args...)
			if code != tt.code || !strings.Contains(out, tt.wantOut) || errOut != tt.wantErr {
				t.Errorf("exit %d\nstdout %q\nstderr %q\nwant exit %d, stdout containing %q, stderr %q", code, out, errOut, tt.code, tt.wantOut, tt.wantErr)
			}
		})
	}
}

func itoa(n int64) string { return strconv.FormatInt(n, 10) }

// TestProxyStatusNotes: a NACKED type and a snapshot pilot refused to send are
// spelled out under the table, one line each.
func TestProxyStatusNotes(t *testing.T) {
	body := `{"proxies":[{"node":"p1","status":"NACKED","connectedSince":"2026-01-01T00:00:00Z","lastSeen":"2026-01-01T00:00:00Z",
  "effectiveRevision":4,"genError":"snapshot for p1 at revision 6 fails sidecar validation, not sent: CDS \"c\":\nbad","genErrorRevision":6,"streamRevision":7,"notCurrent":true,
  "types":[{"type":"CDS","typeUrl":"` + snapshot.ClusterType + `","status":"NACKED","versionRejected":"v5","error":"cluster c:\n  refused"},
           {"type":"MANIFEST","typeUrl":"type.googleapis.com/weft.manifest.v1.SignedManifest","status":"SYNCED"}]}]}`
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { _, _ = w.Write([]byte(body)) }))
	defer srv.Close()
	var out, errb bytes.Buffer
	if code := meshctl.Run(context.Background(), []string{"--pilot", srv.URL, "proxy-status"}, &out, &errb); code != 0 {
		t.Fatalf("exit %d: %s", code, errb.String())
	}
	lines := strings.Split(strings.TrimSpace(out.String()), "\n")
	want := []string{
		`p1 CDS NACKED version v5: cluster c: refused`,
		`p1: sent a snapshot not current for its stream: pilot's compile of store revision 7 (when the stream opened) did not come within --xds-current-wait; a Weft sidecar is not ready on it`,
		`p1: pilot refused its snapshot at revision 6 (not sent): snapshot for p1 at revision 6 fails sidecar validation, not sent: CDS "c": bad`,
	}
	if len(lines) != 5 || !regexp.MustCompile(`^p1 +NACKED +- +- +- +SYNCED +4 `).MatchString(lines[1]) {
		t.Fatalf("table:\n%s", out.String())
	}
	if d := cmp.Diff(want, lines[2:]); d != "" {
		t.Errorf("notes (-want +got):\n%s", d)
	}
}
