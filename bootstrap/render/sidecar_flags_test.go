package render

import (
	"net/netip"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
)

// wildInbound is --inbound-addr's default when intercepting.
var wildInbound = netip.MustParseAddrPort(DefaultInterceptInboundAddr)

// Flags the sidecar runtime added: --insecure-skip-manifest and --staleness.
func TestParseRuntimeFlags(t *testing.T) {
	tests := []struct {
		name string
		args []string
		want *Settings
		err  string
	}{
		{"insecure without key", without("--publisher-key", "--insecure-skip-manifest"),
			want(func(s *Settings) { s.PublisherKey, s.InsecureSkipManifest = "", true }), ""},
		{"no key, not insecure", without("--publisher-key"), nil, "sidecar settings: publisher-key or ca-root: required (whom manifests are trusted from)"},
		{"staleness overrides", with("--staleness", "routes=1s/3s", "--staleness", "clusters=1s/3s/failClosed"),
			want(func(s *Settings) { s.Staleness = []string{"routes=1s/3s", "clusters=1s/3s/failClosed"} }), ""},
		{"too many overrides", with("--staleness", "a", "--staleness", "a", "--staleness", "a", "--staleness", "a", "--staleness", "a",
			"--staleness", "a", "--staleness", "a", "--staleness", "a", "--staleness", "a", "--staleness", "a", "--staleness", "a",
			"--staleness", "a", "--staleness", "a", "--staleness", "a", "--staleness", "a", "--staleness", "a", "--staleness", "a"),
			nil, "sidecar settings: staleness: 17 overrides, limit 16"},
		{"intercept none", with("--intercept", "none"), want(func(*Settings) {}), ""},
		{"intercept iptables", with("--intercept", "iptables"),
			want(func(s *Settings) {
				s.Intercept, s.Node.Interception, s.InboundAddr = "iptables", "iptables", wildInbound
			}), ""},
		{"intercepting, an inbound address given", with("--intercept", "iptables", "--inbound-addr", "127.0.0.21:15007"),
			want(func(s *Settings) {
				s.Intercept, s.Node.Interception, s.Node.InboundPort = "iptables", "iptables", 15007
				s.InboundAddr = netip.MustParseAddrPort("127.0.0.21:15007")
			}), ""},
		{"intercept ebpf in a cgroup", with("--intercept", "ebpf", "--intercept-cgroup", "/sys/fs/cgroup/pod"),
			want(func(s *Settings) {
				s.Intercept, s.InterceptCgroup, s.Node.Interception, s.InboundAddr = "ebpf", "/sys/fs/cgroup/pod", "ebpf", wildInbound
			}), ""},
		{"intercept auto", with("--intercept", "auto"), want(func(s *Settings) { s.Intercept, s.Node.Interception, s.InboundAddr = "auto", "iptables", wildInbound }), ""},
		{"intercept unknown", with("--intercept", "tproxy"), nil, `sidecar settings: intercept: "tproxy", want none, iptables, ebpf or auto`},
		{"cgroup without ebpf", with("--intercept", "iptables", "--intercept-cgroup", "/sys/fs/cgroup/pod"), nil,
			"sidecar settings: intercept-cgroup: only with --intercept=ebpf or auto"},
		{"relative cgroup", with("--intercept", "auto", "--intercept-cgroup", "pod"), nil,
			`sidecar settings: intercept-cgroup: "pod" is not an absolute path`},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, err := Parse(tc.args, readFile)
			if tc.err != "" {
				if err == nil || err.Error() != tc.err {
					t.Fatalf("err = %v, want %q", err, tc.err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			opts := cmp.Options{cmpopts.EquateEmpty(), cmp.Comparer(func(a, b netip.AddrPort) bool { return a == b }), cmp.Comparer(func(a, b netip.Addr) bool { return a == b })}
			if d := cmp.Diff(tc.want, got, opts); d != "" {
				t.Fatalf("(-want +got)\n%s", d)
			}
		})
	}
}
