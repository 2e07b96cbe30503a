//go:build linux

package mode

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"strings"
	"testing"

	"github.com/cilium/ebpf"
	"github.com/hashicorp/go-hclog"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/weft-mesh/weft/conformance/pods"
	"github.com/weft-mesh/weft/ebpf/redirect"
)

// chooseEnv re-executes the test binary in a pod as the sidecar would run:
// Choose with --intercept=<value> on its own cgroup, the decision printed as
// JSON, and for EBPF the metrics after one redirected connection.
const chooseEnv = "WEFT_MODE_TEST_CHOOSE"

func chooseChild() int {
	a, err := Choose(context.Background(), Config{Requested: os.Getenv(chooseEnv), Logger: hclog.NewNullLogger(),
		Redirect: redirect.Config{ProxyUID: uint32(os.Getuid())}})
	if err != nil {
		fmt.Println(`{"error":` + quote(err.Error()) + `}`)
		return 0
	}
	defer a.Close()
	b, _ := json.Marshal(a.Decision)
	fmt.Println(string(b))
	return 0
}

// requireBPF skips (fails with WEFT_REQUIRE_PRIVILEGED=1, and always on a
// verifier error) unless pods can be made and the programs loaded.
func requireBPF(t *testing.T) {
	t.Helper()
	pods.Require(t)
	err := redirect.Check()
	if err == nil {
		return
	}
	var ve *ebpf.VerifierError
	if errors.As(err, &ve) || os.Getenv(pods.RequireEnv) == "1" {
		t.Fatalf("BPF: %+v", err)
	}
	t.Skipf("BPF cannot be loaded here: %v", err)
}

func quote(s string) string { b, _ := json.Marshal(s); return string(b) }

// choice runs chooseChild in pod as user with --intercept=req.
func choice(t *testing.T, node *pods.Node, r pods.Runner, req string) (Decision, string) {
	t.Helper()
	cmd := r.Command(node.TestBinary(t), "-test.run=^$")
	cmd.Env = append(os.Environ(), chooseEnv+"="+req)
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("choose %s: %v: %s", req, err, out)
	}
	var d struct {
		Decision
		Error string `json:"error"`
	}
	if err := json.Unmarshal(out, &d); err != nil {
		t.Fatalf("choose %s said %q: %v", req, out, err)
	}
	return d.Decision, d.Error
}

// TestChooseInPod: as the sidecar (uid 1337) in its pod, auto and ebpf attach
// with net_admin, bpf and perfmon, and without them auto falls back to
// iptables saying why while ebpf refuses to start.
func TestChooseInPod(t *testing.T) {
	requireBPF(t)
	node := pods.NewNode(t)
	pod := node.AddPod(t, "app", "")
	withCaps := pod.As(pods.Proxy("net_admin", "bpf", "perfmon"))
	for _, req := range []string{Auto, EBPF} {
		d, errs := choice(t, node, withCaps, req)
		if errs != "" || d.Mode != EBPF || !strings.Contains(d.Reason, "attached to /sys/fs/cgroup/") {
			t.Errorf("%s with the capabilities: %+v %s; want ebpf attached to the pod's cgroup", req, d, errs)
		}
	}
	bare := pod.As(pods.Proxy())
	d, errs := choice(t, node, bare, Auto)
	if errs != "" || d.Mode != IPTables || !strings.Contains(d.Reason, "auto: eBPF unavailable") {
		t.Errorf("auto without capabilities: %+v %s; want iptables with the reason", d, errs)
	}
	t.Logf("auto without capabilities: %s", d.Reason)
	if d, errs := choice(t, node, pod.As(pods.User{}), Auto); errs != "" || d.Mode != IPTables || !strings.Contains(d.Reason, "runs as root") {
		t.Errorf("auto as root: %+v %s; want iptables, root refused", d, errs)
	}
	if d, errs := choice(t, node, bare, EBPF); !strings.Contains(errs, "--intercept=ebpf: ") {
		t.Errorf("ebpf without capabilities: %+v %q; want a start error", d, errs)
	}
}

// TestCollectorEBPF: in EBPF mode the programs' counters are exported.
func TestCollectorEBPF(t *testing.T) {
	requireBPF(t)
	node := pods.NewNode(t)
	pod := node.AddPod(t, "app", "")
	r, err := redirect.Attach(redirect.Config{Cgroup: pod.Cgroup})
	if err != nil {
		t.Fatalf("Attach: %+v", err)
	}
	a := &Active{Decision: Decision{Mode: EBPF, Reason: "test"}, redirect: r}
	defer a.Close()
	want := `# HELP weft_interception_mode How the sidecar's traffic is intercepted: 1 for the active mode (none, iptables, ebpf), 0 for the others.
# TYPE weft_interception_mode gauge
weft_interception_mode{mode="ebpf"} 1
weft_interception_mode{mode="iptables"} 0
weft_interception_mode{mode="none"} 0
`
	if err := testutil.CollectAndCompare(a.Collector(), strings.NewReader(want), "weft_interception_mode"); err != nil {
		t.Fatal(err)
	}
	if n := testutil.CollectAndCount(a.Collector(), "weft_interception_ebpf_total"); n != 6 {
		t.Fatalf("%d weft_interception_ebpf_total series, want 6", n)
	}
}
