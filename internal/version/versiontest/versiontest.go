// Package versiontest checks a command's --version end to end, on the real binary
// built with the Makefile's -ldflags setting (tools/testkit/proc links Sentinel).
package versiontest

import (
	"os/exec"
	"regexp"
	"strings"
	"testing"
)

// VarFlag is the -X setting the Makefile passes (without its value).
const VarFlag = "github.com/weft-mesh/weft/internal/version.Version"

// Sentinel is the version the check links in.
const Sentinel = "v0.0.0-versiontest"

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
