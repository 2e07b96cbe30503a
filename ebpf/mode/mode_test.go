//go:build linux

package mode

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net/netip"
	"os"
	"reflect"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"go.uber.org/goleak"

	"github.com/weft-mesh/weft/conformance/pods"
	"github.com/weft-mesh/weft/ebpf/redirect"
)

func TestMain(m *testing.M) {
	if os.Getenv(chooseEnv) != "" {
		os.Exit(chooseChild())
	}
	if err := pods.Sweep(); err != nil {
		fmt.Fprintln(os.Stderr, err)
	}
	goleak.VerifyTestMain(m)
}

func TestValidate(t *testing.T) {
	log := hclog.NewNullLogger()
	for _, tc := range []struct {
		name string
		cfg  Config
		err  string
	}{
		{"default", Config{Logger: log}, ""},
		{"each request", Config{Requested: Auto, Logger: log}, ""},
		{"unknown", Config{Requested: "nft", Logger: log}, `--intercept: "nft" is not one of none, iptables, ebpf, auto`},
		{"relative cgroup", Config{Requested: EBPF, Cgroup: "pod", Logger: log}, `--intercept-cgroup: "pod" is not an absolute path`},
		{"timeout at the bound", Config{SelfTestTimeout: MaxSelfTestTimeout, Logger: log}, ""},
		{"timeout past the bound", Config{SelfTestTimeout: MaxSelfTestTimeout + 1, Logger: log}, "self-test timeout 30.000000001s outside [0, 30s]"},
		{"negative timeout", Config{SelfTestTimeout: -1, Logger: log}, "outside [0, 30s]"},
		{"no logger", Config{}, "Logger required"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := tc.cfg.Validate()
			if tc.err == "" {
				if err != nil {
					t.Fatal(err)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), tc.err) {
				t.Fatalf("Validate = %v, want %q", err, tc.err)
			}
		})
	}
}

// fake records what choose asked of the system and answers from its fields.
type fake struct {
	own                     string
	ownErr, testErr, attErr error
	tested, attached        string
	attachedCfg             redirect.Config
	testDeadline            time.Duration
	root                    bool // the sidecar's uid is 0
}

func (f *fake) ops() ops {
	return ops{
		ownCgroup: func() (string, error) { return f.own, f.ownErr },
		selfTest: func(ctx context.Context, cg string) error {
			f.tested = cg
			if d, ok := ctx.Deadline(); ok {
				f.testDeadline = time.Until(d)
			}
			return f.testErr
		},
		attach: func(c redirect.Config) (*redirect.Redirect, error) {
			f.attached, f.attachedCfg = c.Cgroup, c
			if f.attErr != nil {
				return nil, f.attErr
			}
			return nil, nil // a nil *Redirect: Active.Close and Stats treat it as none
		},
	}
}

func TestChoose(t *testing.T) {
	boom := errors.New("boom")
	for _, tc := range []struct {
		name      string
		requested string
		cgroup    string
		f         fake
		want      Decision
		err       string
		tested    string // cgroup self-tested ("" none)
		attached  string
		level     string
	}{
		{"none", "", "", fake{}, Decision{None, "--intercept=none: applications address the sidecar"}, "", "", "", "[INFO]"},
		{"iptables", IPTables, "", fake{}, Decision{IPTables, "--intercept=iptables: the init step's rules redirect"}, "", "", "", "[INFO]"},
		{"ebpf own cgroup", EBPF, "", fake{own: "/cg/pod"}, Decision{EBPF, "self-test passed, attached to /cg/pod"}, "", "/cg/pod", "/cg/pod", "[INFO]"},
		{"ebpf given cgroup", EBPF, "/cg/x", fake{own: "/cg/pod"}, Decision{EBPF, "self-test passed, attached to /cg/x"}, "", "/cg/x", "/cg/x", "[INFO]"},
		{"ebpf self-test fails", EBPF, "", fake{own: "/cg/pod", testErr: boom}, Decision{}, "--intercept=ebpf: boom", "/cg/pod", "", ""},
		{"ebpf attach fails", EBPF, "", fake{own: "/cg/pod", attErr: boom}, Decision{}, "--intercept=ebpf: boom", "/cg/pod", "/cg/pod", ""},
		{"ebpf no own cgroup", EBPF, "", fake{ownErr: boom}, Decision{}, "--intercept=ebpf: boom", "", "", ""},
		{"auto ebpf", Auto, "", fake{own: "/cg/pod"}, Decision{EBPF, "auto: eBPF self-test passed, attached to /cg/pod"}, "", "/cg/pod", "/cg/pod", "[INFO]"},
		{"auto self-test fails", Auto, "", fake{own: "/cg/pod", testErr: boom}, Decision{IPTables, "auto: eBPF unavailable, iptables rules assumed: boom"}, "", "/cg/pod", "", "[WARN]"},
		{"auto attach fails", Auto, "", fake{own: "/cg/pod", attErr: boom}, Decision{IPTables, "auto: eBPF unavailable, iptables rules assumed: boom"}, "", "/cg/pod", "/cg/pod", "[WARN]"},
		{"auto no own cgroup", Auto, "", fake{ownErr: boom}, Decision{IPTables, "auto: eBPF unavailable, iptables rules assumed: boom"}, "", "", "", "[WARN]"},
		{"bad request", "tproxy", "", fake{}, Decision{}, `--intercept: "tproxy" is not one of`, "", "", ""},
		{"ebpf as root", EBPF, "", fake{own: "/cg/pod", root: true}, Decision{}, "--intercept=ebpf: the sidecar runs as root", "", "", ""},
		{"auto as root", Auto, "", fake{own: "/cg/pod", root: true}, Decision{IPTables, "auto: eBPF unavailable, iptables rules assumed: the sidecar runs as root: its own connections cannot be told from the application's by uid (run it as uid 1337)"}, "", "", "", "[WARN]"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var out bytes.Buffer
			log := hclog.New(&hclog.LoggerOptions{Output: &out})
			f := tc.f
			rc := redirect.Config{DNS: true, DNSPort: 15053, OutboundPort: 15001, ProxyUID: 1337, OwnAddrs: []netip.Addr{netip.MustParseAddr("10.250.0.10"), netip.MustParseAddr("fd00:250::10")}}
			if f.root {
				rc.ProxyUID = 0
			}
			a, err := choose(t.Context(), Config{Requested: tc.requested, Cgroup: tc.cgroup, Redirect: rc, Logger: log}, f.ops())
			if f.tested != tc.tested || f.attached != tc.attached {
				t.Errorf("self-tested %q, attached %q; want %q, %q", f.tested, f.attached, tc.tested, tc.attached)
			}
			if tc.err != "" {
				if err == nil || !strings.Contains(err.Error(), tc.err) {
					t.Fatalf("choose = %+v, %v; want error %q", a, err, tc.err)
				}
				if out.Len() != 0 {
					t.Errorf("a failed start logged %q (the caller reports the error)", out.String())
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if a.Decision != tc.want {
				t.Fatalf("decision %+v, want %+v", a.Decision, tc.want)
			}
			if tc.attached != "" {
				rc.Cgroup = tc.attached
				if !reflect.DeepEqual(f.attachedCfg, rc) {
					t.Errorf("attached %+v, want %+v", f.attachedCfg, rc)
				}
			}
			if tc.tested != "" && (f.testDeadline <= 0 || f.testDeadline > DefaultSelfTestTimeout) {
				t.Errorf("self-test deadline %s, want within %s", f.testDeadline, DefaultSelfTestTimeout)
			}
			// Exactly one line, with the mode and the reason.
			lines := strings.Split(strings.TrimSpace(out.String()), "\n")
			if len(lines) != 1 || !strings.Contains(lines[0], tc.level) ||
				!strings.Contains(lines[0], "interception mode chosen: mode="+tc.want.Mode+" reason="+strconv.Quote(tc.want.Reason)) {
				t.Fatalf("log %q, want one %s line with mode=%s and the reason", out.String(), tc.level, tc.want.Mode)
			}
			if err := a.Close(); err != nil {
				t.Fatal(err)
			}
		})
	}
}

func TestDecisionNode(t *testing.T) {
	for m, want := range map[string]string{None: "", IPTables: "iptables", EBPF: "ebpf"} {
		if got := (Decision{Mode: m}).Node(); got != want {
			t.Errorf("Decision{%s}.Node() = %q, want %q", m, got, want)
		}
	}
}

func TestCollectorModes(t *testing.T) {
	a := &Active{Decision: Decision{Mode: IPTables}}
	want := `# HELP weft_interception_mode How the sidecar's traffic is intercepted: 1 for the active mode (none, iptables, ebpf), 0 for the others.
# TYPE weft_interception_mode gauge
weft_interception_mode{mode="ebpf"} 0
weft_interception_mode{mode="iptables"} 1
weft_interception_mode{mode="none"} 0
`
	if err := testutil.CollectAndCompare(a.Collector(), strings.NewReader(want)); err != nil {
		t.Fatal(err)
	}
}
