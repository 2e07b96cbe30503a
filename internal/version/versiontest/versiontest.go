// Package versiontest checks a command's --version end to end: it builds the real
// binary with the Makefile's -ldflags setting and runs it.
package versiontest

import (
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// VarFlag is the -X setting the Makefile passes (without its value).
const VarFlag = "github.com/weft-mesh/weft/internal/version.Version"

// Sentinel is the version the check links in.
const Sentinel = "v0.0.0-versiontest"

// Build builds pkg (an import path) into a temporary directory with Version set to
// Sentinel and returns the binary's path.
func Build(t *testing.T, pkg string, buildFlags ...string) string {
	t.Helper()
	bin := filepath.Join(t.TempDir(), filepath.Base(pkg))
	args := append([]string{"build", "-o", bin, "-ldflags", "-X " + VarFlag + "=" + Sentinel}, buildFlags...)
	out, err := exec.Command("go", append(args, pkg)...).CombinedOutput()
	if err != nil {
		t.Fatalf("go build %s: %v\n%s", pkg, err, out)
	}
	return bin
}

// Check runs `bin --version` and wants exit 0 and one line
// "<program> <Sentinel> (revision ..., go1.x)" on stdout, nothing on stderr.
func Check(t *testing.T, bin, program string) {
	t.Helper()
	cmd := exec.Command(bin, "--version")
	var stderr strings.Builder
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("%s --version: %v; stderr %q", program, err, stderr.String())
	}
	want := regexp.MustCompile(`^` + regexp.QuoteMeta(program+" "+Sentinel) + ` \(revision [^,)]+(, modified)?, go\S+\)\n$`)
	if !want.Match(out) || stderr.Len() != 0 {
		t.Errorf("%s --version: stdout %q stderr %q, want a line matching %s", program, out, stderr.String(), want)
	}
}
