package meshctl_test

import (
	"bytes"
	"context"
	"errors"
	"net/http/httptest"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/hashicorp/go-hclog"
	"go.uber.org/goleak"

	"github.com/weft-mesh/weft/pilot/api"
	"github.com/weft-mesh/weft/pilot/resource"
	"github.com/weft-mesh/weft/pilot/store/boltstore"
	"github.com/weft-mesh/weft/tools/meshctl"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

const (
	svc = `apiVersion: mesh.weft.dev/v1alpha1
kind: Service
metadata: {name: reviews, namespace: shop}
spec:
  selector: {app: reviews}
  ports:
  - {name: http, port: 9080, targetPort: 9080, protocol: HTTP}
`
	svcChanged = `apiVersion: mesh.weft.dev/v1alpha1
kind: Service
metadata: {name: reviews, namespace: shop}
spec:
  selector: {app: reviews}
  ports:
  - {name: http, port: 9081, protocol: HTTP}
`
	route = `apiVersion: mesh.weft.dev/v1alpha1
kind: Route
metadata: {name: reviews, namespace: shop}
spec:
  hosts: [reviews]
  http:
  - route:
    - destination: {service: reviews, port: 9080}
`
	mesh = `apiVersion: mesh.weft.dev/v1alpha1
kind: MeshConfig
metadata: {name: default}
spec: {trustDomain: cluster.local}
`
	bad = `apiVersion: mesh.weft.dev/v1alpha1
kind: Service
metadata: {name: Bad_Name, namespace: shop}
spec:
  ports:
  - {name: http, port: 0}
`
)

type pilot struct {
	url string
	st  *boltstore.Store
}

func startPilot(t *testing.T, token string) *pilot {
	t.Helper()
	st, err := boltstore.Open(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	a, err := api.New(api.Config{Store: st, Logger: hclog.NewNullLogger(), Token: []byte(token)})
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(a)
	t.Cleanup(func() {
		srv.Close()
		_ = st.Close()
	})
	return &pilot{url: srv.URL, st: st}
}

func (p *pilot) revision(t *testing.T) int64 {
	t.Helper()
	r, err := p.st.Revision(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	return int64(r)
}

func writeFiles(t *testing.T, files map[string]string) string {
	t.Helper()
	dir := t.TempDir()
	for name, content := range files {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(content), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	return dir
}

type result struct {
	code           int
	stdout, stderr string
}

func run(args ...string) result {
	var out, errb bytes.Buffer
	code := meshctl.Run(context.Background(), args, &out, &errb)
	return result{code: code, stdout: out.String(), stderr: errb.String()}
}

func validationLines(t *testing.T, path string) []string {
	t.Helper()
	_, err := resource.DecodePath(path)
	var el resource.ErrorList
	if !errors.As(err, &el) {
		t.Fatalf("DecodePath(%s): want ErrorList, got %v", path, err)
	}
	var lines []string
	for _, e := range el {
		lines = append(lines, e.Error())
	}
	return lines
}

func TestValidate(t *testing.T) {
	good := writeFiles(t, map[string]string{"a.yaml": svc + "---\n" + route, "b.yaml": mesh})
	badDir := writeFiles(t, map[string]string{"svc.yaml": bad})
	tests := []struct {
		name       string
		args       []string
		wantCode   int
		wantStdout string
		wantStderr []string // exact lines
	}{
		{name: "valid dir", args: []string{"validate", "-f", good}, wantCode: 0, wantStdout: good + ": 3 objects valid\n"},
		{name: "valid file", args: []string{"validate", "-f", filepath.Join(good, "b.yaml")}, wantCode: 0,
			wantStdout: filepath.Join(good, "b.yaml") + ": 1 object valid\n"},
		{name: "invalid: one line per error", args: []string{"validate", "-f", badDir}, wantCode: 1, wantStderr: validationLines(t, badDir)},
		{name: "missing path", args: []string{"validate", "-f", filepath.Join(good, "nope")}, wantCode: 1,
			wantStderr: []string{"meshctl: stat " + filepath.Join(good, "nope") + ": no such file or directory"}},
		{name: "usage", args: []string{"validate"}, wantCode: 2, wantStderr: []string{"meshctl: usage: meshctl validate -f PATH"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := run(tt.args...)
			if r.code != tt.wantCode {
				t.Fatalf("exit %d, want %d; stderr %s", r.code, tt.wantCode, r.stderr)
			}
			if tt.wantStdout != "" && r.stdout != tt.wantStdout {
				t.Errorf("stdout %q, want %q", r.stdout, tt.wantStdout)
			}
			if tt.wantStderr != nil {
				if d := cmp.Diff(tt.wantStderr, strings.Split(strings.TrimRight(r.stderr, "\n"), "\n")); d != "" {
					t.Errorf("stderr (-want +got):\n%s", d)
				}
			}
		})
	}
	if len(validationLines(t, badDir)) < 2 {
		t.Error("fixture should produce several errors to prove one line each")
	}
}

// TestCommands runs every command against one pilot, in order.
func TestCommands(t *testing.T) {
	p := startPilot(t, "")
	dir := writeFiles(t, map[string]string{"1-svc.yaml": svc, "2-route.yaml": route, "3-mesh.yaml": mesh})
	changed := writeFiles(t, map[string]string{"svc.yaml": svcChanged})
	routeOnly := writeFiles(t, map[string]string{"route.yaml": route})
	badDir := writeFiles(t, map[string]string{"svc.yaml": bad})
	pf := []string{"--pilot", p.url}
	type step struct {
		name       string
		args       []string
		wantCode   int
		wantRev    int64
		wantStdout *regexp.Regexp
		wantStderr *regexp.Regexp
	}
	re := regexp.MustCompile
	steps := []step{
		{name: "apply dir", args: []string{"apply", "-f", dir}, wantCode: 0, wantRev: 1,
			wantStdout: re(`^Service/shop/reviews generation 1 revision 1\nRoute/shop/reviews generation 1 revision 1\nMeshConfig/default generation 1 revision 1\napplied 3 objects: store revision 1\n$`)},
		{name: "apply again unchanged", args: []string{"apply", "-f", dir}, wantCode: 0, wantRev: 1, wantStdout: re(`unchanged: 3 objects`)},
		// The file alone lacks the Service, but pilot has it stored: no warning.
		{name: "route alone, its Service stored", args: []string{"apply", "-f", routeOnly}, wantCode: 0, wantRev: 1, wantStderr: re(`^$`)},
		{name: "stale --if-match", args: []string{"apply", "-f", changed, "--if-match", "5"}, wantCode: 3, wantRev: 1,
			wantStderr: re(`^meshctl: pilot answered 412: Service/shop/reviews: generation is 1, If-Match wanted 5\n$`)},
		{name: "--if-match with several objects", args: []string{"apply", "-f", dir, "--if-match", "1"}, wantCode: 1, wantRev: 1,
			wantStderr: re(`--if-match needs exactly one object`)},
		{name: "apply invalid", args: []string{"apply", "-f", badDir}, wantCode: 1, wantRev: 1, wantStderr: re(`^Service/shop/Bad_Name: `)},
		{name: "current --if-match", args: []string{"apply", "-f", changed, "--if-match", "1"}, wantCode: 0, wantRev: 2,
			wantStdout: re(`Service/shop/reviews generation 2 revision 2\n`)},
		{name: "get table", args: []string{"get", "services", "-n", "shop"}, wantCode: 0, wantRev: 2,
			wantStdout: re(`^KIND +NAMESPACE +NAME +ADDRESSES +GENERATION +REVISION\nService +shop +reviews +240\.240\.0\.1 +2 +2\n$`)},
		{name: "get flags before and after", args: []string{"get", "-n", "shop", "route", "reviews"}, wantCode: 0, wantRev: 2,
			wantStdout: re(`Route +shop +reviews +1 +1\n`)},
		{name: "get yaml", args: []string{"get", "Service", "reviews", "-n", "shop", "-o", "yaml"}, wantCode: 0, wantRev: 2,
			wantStdout: re(`(?s)kind: Service.*generation: 2.*revision: 2`)},
		{name: "get json list all namespaces", args: []string{"get", "services", "-A", "-o", "json"}, wantCode: 0, wantRev: 2,
			wantStdout: re(`(?s)^\[\n.*"generation": 2`)},
		{name: "get cluster-wide", args: []string{"get", "meshconfig", "default"}, wantCode: 0, wantRev: 2, wantStdout: re(`MeshConfig +- +default +1 +1`)},
		{name: "get empty namespace", args: []string{"get", "services"}, wantCode: 0, wantRev: 2, wantStderr: re(`^no services found\n$`)},
		{name: "get missing", args: []string{"get", "services", "nope", "-n", "shop"}, wantCode: 4, wantRev: 2,
			wantStderr: re(`^meshctl: pilot answered 404: Service/shop/nope: not found\n$`)},
		{name: "get unknown kind lists the kinds", args: []string{"get", "widgets"}, wantCode: 1, wantRev: 2,
			wantStderr: re(`^meshctl: unknown kind "widgets"; kinds: meshconfigs \(mc\), services \(svc\), workloads \(wl\), destinationpolicies \(dp\), routes \(rt\), peerauthentications \(pa\), authorizationpolicies \(ap\), stalenesspolicies \(sp\), overrides \(ov\)\n$`)},
		{name: "get short name", args: []string{"get", "svc", "-n", "shop"}, wantCode: 0, wantRev: 2, wantStdout: re(`\nService +shop +reviews +240\.240\.0\.1 +2 +2\n$`)},
		{name: "get plural, other case", args: []string{"get", "Services", "-n", "shop"}, wantCode: 0, wantRev: 2, wantStdout: re(`\nService +shop +reviews +240\.240\.0\.1 +2 +2\n$`)},
		{name: "get upper-case short name", args: []string{"get", "RT", "reviews", "-n", "shop"}, wantCode: 0, wantRev: 2, wantStdout: re(`Route +shop +reviews +1 +1\n`)},
		{name: "get short name, cluster-wide", args: []string{"get", "mc"}, wantCode: 0, wantRev: 2, wantStdout: re(`MeshConfig +- +default +1 +1`)},
		{name: "get bad output", args: []string{"get", "services", "-o", "xml"}, wantCode: 2, wantRev: 2},
		{name: "get -A with name", args: []string{"get", "services", "x", "-A"}, wantCode: 2, wantRev: 2},
		{name: "history", args: []string{"history", "service", "reviews", "-n", "shop"}, wantCode: 0, wantRev: 2,
			wantStdout: re(`^REVISION  +OP  +GENERATION  +TIME\n1  +PUT  +1  +\d{4}-\d\d-\d\dT\S+Z\n2  +PUT  +2  +\S+\n$`)},
		{name: "history missing", args: []string{"history", "service", "nope", "-n", "shop"}, wantCode: 4, wantRev: 2},
		{name: "history usage", args: []string{"history", "service"}, wantCode: 2, wantRev: 2},
		{name: "delete stale", args: []string{"delete", "route", "reviews", "-n", "shop", "--if-match", "9"}, wantCode: 3, wantRev: 2},
		{name: "delete", args: []string{"delete", "route", "reviews", "-n", "shop", "--if-match", "1"}, wantCode: 0, wantRev: 3,
			wantStdout: re(`^Route/shop/reviews deleted: store revision 3\n$`)},
		{name: "delete missing", args: []string{"delete", "route", "reviews", "-n", "shop"}, wantCode: 4, wantRev: 3},
		{name: "history after delete", args: []string{"history", "route", "reviews", "-n", "shop"}, wantCode: 0, wantRev: 3,
			wantStdout: re(`^REVISION +OP +GENERATION +TIME\n1  +PUT  +1  +\S+\n3  +DELETE  +1  +\S+\n$`)},
		{name: "delete short name", args: []string{"delete", "svc", "reviews", "-n", "shop"}, wantCode: 0, wantRev: 4,
			wantStdout: re(`^Service/shop/reviews deleted: store revision 4\n$`)},
	}
	for _, s := range steps {
		r := run(append(pf, s.args...)...)
		if r.code != s.wantCode {
			t.Fatalf("%s: exit %d, want %d; stdout %q stderr %q", s.name, r.code, s.wantCode, r.stdout, r.stderr)
		}
		if s.wantStdout != nil && !s.wantStdout.MatchString(r.stdout) {
			t.Errorf("%s: stdout %q does not match %s", s.name, r.stdout, s.wantStdout)
		}
		if s.wantStderr != nil && !s.wantStderr.MatchString(r.stderr) {
			t.Errorf("%s: stderr %q does not match %s", s.name, r.stderr, s.wantStderr)
		}
		if s.wantCode != 0 && strings.Count(strings.TrimRight(r.stderr, "\n"), "\n") > 0 && s.name != "apply invalid" {
			t.Errorf("%s: error is not one line: %q", s.name, r.stderr)
		}
		if got := p.revision(t); got != s.wantRev {
			t.Errorf("%s: store revision %d, want %d", s.name, got, s.wantRev)
		}
	}
}

func TestGlobalAndTransport(t *testing.T) {
	p := startPilot(t, "t0ken")
	tokens := writeFiles(t, map[string]string{"good": "t0ken\n", "wrong": "nope", "empty": ""})
	tests := []struct {
		name     string
		args     []string
		wantCode int
		stderr   *regexp.Regexp
	}{
		{name: "no args", args: nil, wantCode: 2, stderr: regexp.MustCompile(`^usage: meshctl`)},
		{name: "help", args: []string{"help"}, wantCode: 0},
		{name: "unknown command", args: []string{"frob"}, wantCode: 2, stderr: regexp.MustCompile(`^meshctl: unknown command "frob" \(try meshctl help\)\n$`)},
		{name: "unknown global flag", args: []string{"--frob", "get", "services"}, wantCode: 2},
		{name: "bad pilot URL", args: []string{"--pilot", "ftp://x", "get", "services"}, wantCode: 2, stderr: regexp.MustCompile(`is not an http\(s\) URL`)},
		{name: "pilot down", args: []string{"--pilot", "http://127.0.0.1:1", "get", "services"}, wantCode: 2,
			stderr: regexp.MustCompile(`^meshctl: pilot not reachable at http://127.0.0.1:1: connection refused \(is pilot running\? --pilot\)\n$`)},
		{name: "pilot down, every command", args: []string{"--pilot", "http://127.0.0.1:1", "proxy-status"}, wantCode: 2,
			stderr: regexp.MustCompile(`^meshctl: pilot not reachable at http://127.0.0.1:1: connection refused \(is pilot running\? --pilot\)\n$`)},
		{name: "no token", args: []string{"--pilot", p.url, "get", "services"}, wantCode: 2, stderr: regexp.MustCompile(`^meshctl: pilot answered 401: missing or wrong bearer token\n$`)},
		{name: "wrong token", args: []string{"--pilot", p.url, "--token-file", filepath.Join(tokens, "wrong"), "get", "services"}, wantCode: 2},
		{name: "empty token file", args: []string{"--pilot", p.url, "--token-file", filepath.Join(tokens, "empty"), "get", "services"}, wantCode: 2},
		{name: "token", args: []string{"--pilot", p.url, "--token-file", filepath.Join(tokens, "good"), "get", "services"}, wantCode: 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := run(tt.args...)
			if r.code != tt.wantCode {
				t.Fatalf("exit %d, want %d; stderr %q", r.code, tt.wantCode, r.stderr)
			}
			if tt.stderr != nil && !tt.stderr.MatchString(r.stderr) {
				t.Errorf("stderr %q does not match %s", r.stderr, tt.stderr)
			}
		})
	}
}
