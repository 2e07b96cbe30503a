// Package archtest enforces DESIGN.md's dependency rules with `go list`, so a
// violation fails `make test` instead of surviving review.
package archtest

import (
	"bytes"
	"encoding/json"
	"os/exec"
	"strings"
	"testing"

	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

const module = "github.com/weft-mesh/weft/"

type pkg struct {
	ImportPath string
	Deps       []string
}

func listPackages(t *testing.T) []pkg {
	t.Helper()
	cmd := exec.Command("go", "list", "-e", "-json=ImportPath,Deps", module+"...")
	var out, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &stderr
	if err := cmd.Run(); err != nil {
		t.Fatalf("go list: %v: %s", err, stderr.String())
	}
	var pkgs []pkg
	dec := json.NewDecoder(&out)
	for dec.More() {
		var p pkg
		if err := dec.Decode(&p); err != nil {
			t.Fatalf("go list output: %v", err)
		}
		pkgs = append(pkgs, p)
	}
	if len(pkgs) < 10 {
		t.Fatalf("go list found only %d packages; the rule check would prove nothing", len(pkgs))
	}
	return pkgs
}

// rule: packages under from must not depend (transitively) on packages under to.
type rule struct {
	from, to string
	why      string
}

var rules = []rule{
	{from: "sidecar/", to: "pilot/", why: "the data plane never imports the control plane; shared words live in bootstrap/node and certs/"},
	{from: "bootstrap/", to: "pilot/", why: "bootstrap is a shared leaf"},
	{from: "bootstrap/", to: "sidecar/", why: "bootstrap is a shared leaf"},
	{from: "sidecar/", to: "k8s.io/", why: "the sidecar stays small (idle RSS); only the injector (bootstrap/inject, webhook) speaks Kubernetes' API, and bootstrap/probe is the words they share"},
	{from: "bootstrap/probe", to: "k8s.io/", why: "the sidecar links it"},
	// Pilot's storage and its logger: package init alone links them. A blank
	// import of etcd's client in sidecar/cmd/sidecar measured +1.0 MiB of the
	// binary's loaded segments (file RSS is 85-90% of those, fault-around) and
	// +0.5 MiB of init-time heap (GODEBUG=inittrace=1): idle RSS, issue #7.
	{from: "sidecar/", to: "go.etcd.io/", why: "the sidecar stays small (idle RSS); etcd's client and bbolt are pilot's stores"},
	{from: "sidecar/", to: "go.uber.org/zap", why: "the sidecar stays small (idle RSS); it logs with hclog, zap comes with etcd's client"},
	{from: "sidecar/", to: "github.com/grpc-ecosystem/", why: "the sidecar stays small (idle RSS); grpc-gateway comes with etcd's API"},
	// go-control-plane's generated packages register their file descriptors
	// at init (with cncf/xds, validate and annotations): ~5.5 MiB of the
	// sidecar's idle RSS. The sidecar decodes xDS with sidecar/xdswire's
	// trimmed, wire-compatible types; pilot and tests keep the full ones.
	{from: "sidecar/cmd/sidecar", to: "github.com/envoyproxy/", why: "the sidecar stays small (idle RSS); it speaks xDS with sidecar/xdswire's trimmed types"},
	{from: "sidecar/cmd/sidecar", to: "github.com/cncf/xds", why: "the sidecar stays small (idle RSS); it speaks xDS with sidecar/xdswire's trimmed types"},
	{from: "certs/", to: "pilot/", why: "certs is shared by both planes"},
	{from: "certs/", to: "sidecar/", why: "certs is shared by both planes"},
	{from: "pilot/xds/gen", to: "pilot/store", why: "generation reads only its arguments"},
	{from: "pilot/ir", to: "google.golang.org/protobuf", why: "ir is proto-free"},
	{from: "sidecar/httpproxy", to: "sidecar/xdsclient", why: "request-path packages read *dataplane.Config only"},
	{from: "sidecar/tcpproxy", to: "sidecar/xdsclient", why: "request-path packages read *dataplane.Config only"},
	{from: "sidecar/cluster", to: "sidecar/xdsclient", why: "request-path packages read *dataplane.Config only"},
	{from: "sidecar/listener", to: "sidecar/xdsclient", why: "request-path packages read *dataplane.Config only"},
	{from: "sidecar/dataplane", to: "sidecar/xdsclient", why: "request-path packages read *dataplane.Config only"},
	{from: "sidecar/httpproxy", to: "sidecar/ejectreport", why: "outlier reports never touch the request path"},
	{from: "sidecar/tcpproxy", to: "sidecar/ejectreport", why: "outlier reports never touch the request path"},
	{from: "sidecar/cluster", to: "sidecar/ejectreport", why: "outlier reports never touch the request path"},
	{from: "sidecar/listener", to: "sidecar/ejectreport", why: "outlier reports never touch the request path"},
	{from: "sidecar/dataplane", to: "sidecar/ejectreport", why: "outlier reports never touch the request path"},
	{from: "sidecar/outlier", to: "sidecar/ejectreport", why: "outlier reports never touch the request path"},
}

func TestDependencyRules(t *testing.T) {
	pkgs := listPackages(t)
	for _, r := range rules {
		target := r.to
		if !strings.Contains(target, ".") {
			target = module + target
		}
		for _, p := range pkgs {
			rel := strings.TrimPrefix(p.ImportPath, module)
			if !strings.HasPrefix(rel, r.from) {
				continue
			}
			for _, d := range p.Deps {
				if strings.HasPrefix(d, target) {
					t.Errorf("%s imports %s (via its dependencies): %s", p.ImportPath, d, r.why)
					break
				}
			}
		}
	}
}

// TestListSeesDependencies guards the rule check itself: a dependency that certainly
// exists must be visible, or every rule above would pass vacuously.
func TestListSeesDependencies(t *testing.T) {
	for _, p := range listPackages(t) {
		if p.ImportPath != module+"pilot/xds/gen" {
			continue
		}
		for _, d := range p.Deps {
			if d == module+"pilot/xds/snapshot" {
				return
			}
		}
		t.Fatalf("pilot/xds/gen deps do not include pilot/xds/snapshot: %v", p.Deps)
	}
	t.Fatal("pilot/xds/gen not listed")
}
