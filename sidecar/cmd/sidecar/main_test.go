package main

import (
	"os/exec"
	"strings"
	"testing"

	"go.uber.org/goleak"

	"github.com/weft-mesh/weft/internal/version/versiontest"
	"github.com/weft-mesh/weft/tools/testkit/proc"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m, goleak.Cleanup(proc.Cleanup)) }

// sidecarTags are the build tags `make build` gives the sidecar (Makefile
// SIDECAR_BUILD); proc's TestMatchesMakefile keeps the two in step.
const sidecarTags = proc.SidecarTags

// The sidecar's idle RSS (issue #4: <= 20 MiB) is mostly its own code and
// read-only data, so a dependency that makes the linker keep dead code costs
// megabytes of resident memory. These packages call reflect's Method/MethodByName
// with computed names, after which the linker keeps every exported method of
// every linked type: with the Envoy protos linked, ~5 MiB more binary.
func TestNoDependencyDisablingDeadMethodElimination(t *testing.T) {
	out, err := exec.Command("go", "list", "-deps", "-tags", sidecarTags, ".").CombinedOutput()
	if err != nil {
		t.Fatalf("go list: %v\n%s", err, out)
	}
	deps := map[string]bool{}
	for _, p := range strings.Fields(string(out)) {
		deps[p] = true
	}
	if !deps["github.com/weft-mesh/weft/sidecar/app"] {
		t.Fatalf("go list output lacks sidecar/app; is it the dependency list?\n%s", out)
	}
	for _, tc := range []struct{ pkg, via string }{
		{"text/template", "templates call methods by name"},
		{"html/template", "templates call methods by name"},
		{"golang.org/x/net/trace", "grpc without the grpcnotrace tag; brings html/template"},
	} {
		if deps[tc.pkg] {
			t.Errorf("sidecar depends on %s (%s): the linker keeps every exported method; find the importer with `go list -deps -f '{{.ImportPath}}: {{.Imports}}' -tags %s ./sidecar/cmd/sidecar`",
				tc.pkg, tc.via, sidecarTags)
		}
	}
}

func TestVersionAndHelp(t *testing.T) {
	bin := proc.Build(t, proc.Sidecar)
	versiontest.Check(t, bin, "sidecar")
	for _, args := range [][]string{{"-h"}, {"--help"}, {"--node-id", "x", "--help"}} {
		out, err := exec.Command(bin, args...).Output()
		if err != nil || !strings.HasPrefix(string(out), "usage: sidecar") {
			t.Errorf("sidecar %q: %v, stdout %q: want exit 0 and the usage", args, err, out)
		}
	}
	// Without settings it still refuses to run, with exit 2 and the usage.
	out, err := exec.Command(bin).CombinedOutput()
	if ee, ok := err.(*exec.ExitError); !ok || ee.ExitCode() != 2 || !strings.Contains(string(out), "usage: sidecar") {
		t.Errorf("sidecar with no flags: %v, output %q: want exit 2 and the usage", err, out)
	}
}

func TestInfoFlag(t *testing.T) {
	for _, tt := range []struct {
		args []string
		want string
	}{
		{nil, ""},
		{[]string{"--version"}, "version"},
		{[]string{"-version"}, "version"},
		{[]string{"--node-id", "a", "-h"}, "help"},
		{[]string{"--help"}, "help"},
		{[]string{"--", "--version"}, ""},
		{[]string{"--node-id", "a"}, ""},
	} {
		if got := infoFlag(tt.args); got != tt.want {
			t.Errorf("infoFlag(%q) = %q, want %q", tt.args, got, tt.want)
		}
	}
}
