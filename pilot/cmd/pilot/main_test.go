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

func TestVersionAndHelp(t *testing.T) {
	bin := proc.Build(t, proc.Pilot)
	versiontest.Check(t, bin, "pilot")
	for _, arg := range []string{"-h", "--help"} {
		out, err := exec.Command(bin, arg).CombinedOutput()
		if err != nil || !strings.Contains(string(out), "-data-dir") || !strings.Contains(string(out), "-version") {
			t.Errorf("pilot %s: %v, output %q: want exit 0 and the flags", arg, err, out)
		}
		// Identity (issue #9): the listeners, the insecure mode and every xDS bound.
		for _, f := range []string{"-xds-tls-addr", "-insecure-plaintext-registration", "-trust-domain", "-xds-max-subscriptions",
			"-xds-max-read-only-subscriptions", "-xds-max-resource-name-bytes", "-xds-max-streams-per-identity", "-xds-max-streams-per-connection",
			"-xds-max-recv-bytes", "-xds-max-read-only-streams", "-etcd-registration-ttl", "node id 256 bytes, 64 labels", "default \"127.0.0.1:15010\"", "default \":15012\""} {
			if !strings.Contains(string(out), f) {
				t.Errorf("pilot %s: usage does not show %s", arg, f)
			}
		}
	}
	out, err := exec.Command(bin, "--no-such-flag").CombinedOutput()
	if ee, ok := err.(*exec.ExitError); !ok || ee.ExitCode() != 2 {
		t.Errorf("pilot --no-such-flag: %v (output %q), want exit 2", err, out)
	}
}
