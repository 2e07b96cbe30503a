package intercept

import (
	"errors"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"go.uber.org/goleak"

	"github.com/weft-mesh/weft/conformance/pods"
)

var update = flag.Bool("update", false, "rewrite testdata/*.golden from the current output")

func TestMain(m *testing.M) {
	// The test binary doubles as the processes the privileged tests run as other
	// uids (netns_test.go).
	if mode := os.Getenv(helperEnv); mode != "" {
		os.Exit(runHelper(mode, os.Getenv("WEFT_HELPER_ARG")))
	}
	flag.Parse()
	if err := pods.Sweep(); err != nil { // what a killed privileged run left
		fmt.Fprintln(os.Stderr, err)
	}
	goleak.VerifyTestMain(m)
}

// goldenCases are command lines; their golden file holds the IPv4 then the IPv6 input.
var goldenCases = []struct {
	name string
	args []string
}{
	{"default", nil},
	{"istio-injector", []string{"-p", "15001", "-z", "15006", "-u", "1337", "-g", "1337", "-m", "REDIRECT", "-i", "*", "-x", "", "-b", "*", "-d", "15090,15021,15020"}},
	{"no-dns", []string{"--dns=false"}},
	{"inbound-list", []string{"-b", "80,443,9000:9100", "-d", "9090"}},
	{"inbound-none", []string{"-b", ""}},
	{"excludes", []string{"-o", "3306, 6379:6380", "-x", "10.96.0.0/12,fd00::/8,192.168.1.1,2001:db8::1", "-d", "8081"}},
	{"custom-ids-ports", []string{"-p", "16001", "-z", "16006", "-u", "2000", "-g", "3000", "--dns-port", "16053"}},
	{"ebpf", []string{"--mode", "ebpf", "-d", "9090"}},
}

func goldenText(cfg Config) string {
	return "# IPv4\n" + Rules(cfg, false) + "# IPv6\n" + Rules(cfg, true)
}

func TestRulesGolden(t *testing.T) {
	for _, tc := range goldenCases {
		t.Run(tc.name, func(t *testing.T) {
			p, err := ParseArgs(tc.args)
			if err != nil {
				t.Fatal(err)
			}
			got := goldenText(p.Config)
			if again := goldenText(p.Config); again != got {
				t.Fatal("Rules is not deterministic")
			}
			path := filepath.Join("testdata", tc.name+".golden")
			if *update {
				if err := os.WriteFile(path, []byte(got), 0o644); err != nil {
					t.Fatal(err)
				}
			}
			want, err := os.ReadFile(path)
			if err != nil {
				t.Fatalf("%v (run with -update to create it)", err)
			}
			if diff := cmp.Diff(string(want), got); diff != "" {
				t.Errorf("%s (-want +got):\n%s", path, diff)
			}
		})
	}
}

// TestRulesProperties checks, beside the golden files, the properties a reader of
// them would check by eye.
func TestRulesProperties(t *testing.T) {
	def := DefaultConfig()
	v4 := Rules(def, false)
	for _, want := range []string{
		"-A OUTPUT -j WEFT_OUTPUT\n",
		"-A PREROUTING -p tcp -j WEFT_INBOUND\n",
		"-A WEFT_REDIRECT -p tcp -j REDIRECT --to-ports 15001\n",
		"-A WEFT_IN_REDIRECT -p tcp -j REDIRECT --to-ports 15006\n",
		"-A WEFT_OUTPUT -m owner --uid-owner 1337 -j RETURN\n",
		"-A WEFT_OUTPUT -m owner --gid-owner 1337 -j RETURN\n",
		"-A WEFT_OUTPUT -s 127.0.0.6/32 -o lo -j RETURN\n",
		"-A WEFT_DNS -p udp -m udp --dport 53 -j REDIRECT --to-ports 15053\n",
		"-A WEFT_DNS -p tcp -m tcp --dport 53 -j REDIRECT --to-ports 15053\n",
		"*raw\n",
	} {
		if !strings.Contains(v4, want) {
			t.Errorf("default IPv4 rules lack %q", want)
		}
	}
	// The uid/gid RETURNs come before the jump to DNS and the redirect: the proxy's
	// own traffic (its upstream connections, its DNS queries) is never captured.
	if i, j := strings.Index(v4, "--uid-owner 1337 -j RETURN"), strings.Index(v4, "-A WEFT_OUTPUT -j WEFT_DNS"); i < 0 || j < i {
		t.Errorf("uid RETURN (%d) not before the DNS jump (%d)", i, j)
	}
	for _, p := range []string{"15000", "15001", "15006", "15021", "15053", "15090"} {
		if !strings.Contains(v4, "-A WEFT_INBOUND -p tcp -m tcp --dport "+p+" -j RETURN\n") {
			t.Errorf("sidecar port %s not excluded inbound", p)
		}
	}
	v6 := Rules(def, true)
	if strings.Contains(v6, "127.0.0.") || !strings.Contains(v6, "-s ::6/128 -o lo -j RETURN") || !strings.Contains(v6, "-d ::1/128 -j RETURN") {
		t.Errorf("IPv6 rules do not use ::1 and ::6:\n%s", v6)
	}
	// Excluded CIDRs go to their own family only.
	p, err := ParseArgs([]string{"-x", "10.0.0.0/8,fd00::/8"})
	if err != nil {
		t.Fatal(err)
	}
	if r := Rules(p.Config, false); !strings.Contains(r, "-d 10.0.0.0/8 -j RETURN") || strings.Contains(r, "fd00::/8") {
		t.Errorf("IPv4 rules and -x: %s", r)
	}
	if r := Rules(p.Config, true); strings.Contains(r, "10.0.0.0/8") || !strings.Contains(r, "-d fd00::/8 -j RETURN") {
		t.Errorf("IPv6 rules and -x: %s", r)
	}
	// ebpf: inbound only, no outbound redirect, no DNS, no raw table.
	p, err = ParseArgs([]string{"--mode", "ebpf"})
	if err != nil {
		t.Fatal(err)
	}
	if r := Rules(p.Config, false); strings.Contains(r, "WEFT_REDIRECT") || strings.Contains(r, "WEFT_DNS") || strings.Contains(r, "*raw") ||
		!strings.Contains(r, "-j REDIRECT --to-ports 15006") {
		t.Errorf("ebpf rules: %s", r)
	}
}

func TestParseArgsErrors(t *testing.T) {
	many := func(n int, f func(i int) string) string {
		s := make([]string, n)
		for i := range s {
			s[i] = f(i)
		}
		return strings.Join(s, ",")
	}
	ports := func(n int) string { return many(n, func(i int) string { return fmt.Sprint(1000 + i) }) }
	cidrs := func(n int) string { return many(n, func(i int) string { return fmt.Sprintf("10.%d.0.0/16", i) }) }
	for _, tc := range []struct {
		args []string
		want string // "" = valid; else a substring of the error (the flag's name first)
	}{
		{[]string{"-p", "0"}, "flag -p"},
		{[]string{"-p", "65536"}, "flag -p"},
		{[]string{"-p", "15006"}, "-z: port 15006 is also -p"},
		{[]string{"-z", "x"}, "flag -z"},
		{[]string{"--dns-port", "15001"}, "--dns-port: port 15001 is also -p"},
		{[]string{"-u", "-1"}, "flag -u"},
		{[]string{"-u", "4294967295"}, "flag -u"},
		{[]string{"-u", "4294967294"}, ""},
		{[]string{"-g", "abc"}, "flag -g"},
		{[]string{"-b", "80,,443"}, "flag -b"},
		{[]string{"-b", "80,"}, "flag -b"},
		{[]string{"-b", "90:80"}, "flag -b"},
		{[]string{"-b", "15021"}, "-b: 15021 is excluded"},
		{[]string{"-b", "8080", "-d", "8080"}, "-b: 8080 is excluded"},
		{[]string{"-b", "8080:8081", "-d", "8080"}, ""},
		{[]string{"-d", "*"}, "flag -d"},
		{[]string{"-o", "0"}, "flag -o"},
		{[]string{"-x", "*"}, "flag -x"},
		{[]string{"-x", "10.0.0.1/8"}, "host bits"},
		{[]string{"-x", "10.0.0.0/33"}, "flag -x"},
		{[]string{"-x", "fe80::1%eth0"}, "flag -x"},
		{[]string{"-x", "::ffff:10.0.0.0/104"}, "IPv4-mapped"},
		{[]string{"--mode", "tproxy"}, "flag -mode"},
		{[]string{"--backend", "xt"}, "flag -backend"},
		{[]string{"--ipv6=maybe"}, "for -ipv6"},
		{[]string{"--ipv6"}, ""},
		{[]string{"--mode", "ebpf", "-o", "53"}, "-o: not supported with --mode ebpf"},
		{[]string{"--mode", "ebpf", "-x", "10.0.0.0/8"}, "-x: not supported with --mode ebpf"},
		{[]string{"--mode", "ebpf", "--dns=false"}, "--dns: not used with --mode ebpf"},
		{[]string{"--mode", "ebpf", "--dns-port", "53"}, "--dns-port: not used"},
		{[]string{"--dry-run", "--remove"}, "--dry-run: not with --remove"},
		{[]string{"-k", "eth1"}, "not defined: -k"},
		{[]string{"-m", "TPROXY"}, "-m: \"TPROXY\": only REDIRECT"},
		{[]string{"-i", "10.0.0.0/8"}, "-i: \"10.0.0.0/8\": only '*'"},
		{[]string{"-m", "REDIRECT", "-i", "*"}, ""},
		{[]string{"extra"}, `unexpected argument "extra"`},
		// Limits: at the bound, and one past it.
		{[]string{"-d", ports(MaxPorts)}, ""},
		{[]string{"-d", ports(MaxPorts + 1)}, "65 items (at most 64)"},
		{[]string{"-o", ports(MaxPorts)}, ""},
		{[]string{"-o", ports(MaxPorts + 1)}, "flag -o"},
		{[]string{"-b", ports(MaxPorts)}, ""},
		{[]string{"-b", ports(MaxPorts + 1)}, "flag -b"},
		{[]string{"-x", cidrs(MaxCIDRs)}, ""},
		{[]string{"-x", cidrs(MaxCIDRs + 1)}, "65 items (at most 64)"},
		{[]string{"-d", "1" + strings.Repeat(" ", MaxListBytes-1)}, ""},
		{[]string{"-d", "1" + strings.Repeat(" ", MaxListBytes)}, "4097 bytes (at most 4096)"},
	} {
		_, err := ParseArgs(tc.args)
		switch {
		case tc.want == "" && err != nil:
			t.Errorf("%q: %v", tc.args, err)
		case tc.want != "" && err == nil:
			t.Errorf("%q: no error, want %q", tc.args, tc.want)
		case tc.want != "" && !strings.Contains(err.Error(), tc.want):
			t.Errorf("%q: %v, want it to contain %q", tc.args, err, tc.want)
		case err != nil && !errors.Is(err, ErrInvalid):
			t.Errorf("%q: %v does not wrap ErrInvalid", tc.args, err)
		}
	}
}

// TestValidateLimits checks the bounds on a Config built in code (not through the
// parsers, which stop earlier).
func TestValidateLimits(t *testing.T) {
	c := DefaultConfig()
	for i := range MaxPorts {
		c.ExcludeOutboundPorts = append(c.ExcludeOutboundPorts, PortRange{uint16(100 + i), uint16(100 + i)})
	}
	if err := c.Validate(); err != nil {
		t.Fatalf("at MaxPorts: %v", err)
	}
	c.ExcludeOutboundPorts = append(c.ExcludeOutboundPorts, PortRange{99, 99})
	if err := c.Validate(); err == nil || !strings.Contains(err.Error(), "-o: 65 ports (at most 64)") {
		t.Fatalf("past MaxPorts: %v", err)
	}
	c = DefaultConfig()
	c.ExcludeInboundPorts = []PortRange{{0, 5}}
	if err := c.Validate(); err == nil || !strings.Contains(err.Error(), "-d:") {
		t.Fatalf("port 0: %v", err)
	}
	c = DefaultConfig()
	c.Mode = "x"
	if err := c.Validate(); err == nil || !strings.Contains(err.Error(), "--mode") {
		t.Fatalf("bad mode: %v", err)
	}
}

func TestMainExitStatus(t *testing.T) {
	var out, errb strings.Builder
	if rc := Main([]string{"--help"}, &out, &errb); rc != 0 || !strings.Contains(out.String(), "usage: sidecar intercept") {
		t.Errorf("--help: rc %d, %q", rc, out.String())
	}
	out.Reset()
	if rc := Main([]string{"-p", "nope"}, &out, &errb); rc != 2 || !strings.Contains(errb.String(), "flag -p") {
		t.Errorf("bad flag: rc %d, %q", rc, errb.String())
	}
	out.Reset()
	if rc := Main([]string{"--dry-run", "--ipv6=false", "--dns=false"}, &out, &errb); rc != 0 {
		t.Fatalf("dry run: rc %d: %s", rc, errb.String())
	}
	p, _ := ParseArgs([]string{"--dns=false"})
	if want := "# iptables-restore --noflush input (IPv4)\n" + Rules(p.Config, false); out.String() != want {
		t.Errorf("dry run printed\n%s\nwant\n%s", out.String(), want)
	}
}

func TestRestoreInput(t *testing.T) {
	saved := parseSave(`# Generated by iptables-nft-save
*nat
:PREROUTING ACCEPT [0:0]
:OUTPUT ACCEPT [3:180]
:OTHER - [0:0]
:WEFT_OUTPUT - [0:0]
:WEFT_DNS - [0:0]
-A PREROUTING -p tcp -j OTHER
-A OUTPUT -j WEFT_OUTPUT
-A OUTPUT -p tcp -j WEFT_OUTPUT
-A OTHER -g WEFT_DNS
-A WEFT_OUTPUT -j WEFT_DNS
COMMIT
*filter
:INPUT ACCEPT [0:0]
:WEFT_OUTPUT - [0:0]
-A INPUT -j WEFT_OUTPUT
COMMIT
`)
	p, err := ParseArgs([]string{"--dns=false"})
	if err != nil {
		t.Fatal(err)
	}
	want := ruleSet(p.Config, false)
	got := restoreInput(saved, want)
	// Our nat chains are declared (flushed or created); the jumps to them from
	// outside are deleted (also from another's chain: -X needs it); WEFT_DNS, no longer
	// wanted, is removed; OTHER, filter and its WEFT_OUTPUT (not a chain of ours in
	// that table) are not touched.
	wantText := `*nat
:WEFT_INBOUND - [0:0]
:WEFT_IN_REDIRECT - [0:0]
:WEFT_OUTPUT - [0:0]
:WEFT_REDIRECT - [0:0]
:WEFT_DNS - [0:0]
-D OUTPUT -j WEFT_OUTPUT
-D OUTPUT -p tcp -j WEFT_OUTPUT
-D OTHER -g WEFT_DNS
-X WEFT_DNS
` + strings.Join(want[0].rules, "\n") + "\nCOMMIT\n"
	if diff := cmp.Diff(wantText, got); diff != "" {
		t.Errorf("restore input (-want +got):\n%s", diff)
	}
	// Removal: the same deletions, every chain of ours removed.
	rm := restoreInput(saved, nil)
	wantRm := `*nat
:WEFT_OUTPUT - [0:0]
:WEFT_DNS - [0:0]
-D OUTPUT -j WEFT_OUTPUT
-D OUTPUT -p tcp -j WEFT_OUTPUT
-D OTHER -g WEFT_DNS
-X WEFT_OUTPUT
-X WEFT_DNS
COMMIT
`
	if diff := cmp.Diff(wantRm, rm); diff != "" {
		t.Errorf("removal input (-want +got):\n%s", diff)
	}
	if s := restoreInput(parseSave("*nat\n:OUTPUT ACCEPT [0:0]\nCOMMIT\n"), nil); s != "" {
		t.Errorf("removal with nothing of ours: %q", s)
	}
}
