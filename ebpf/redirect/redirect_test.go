//go:build linux

package redirect

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os"
	"reflect"
	"strconv"
	"strings"
	"testing"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/asm"
	"go.uber.org/goleak"

	"github.com/weft-mesh/weft/conformance/pods"
	"github.com/weft-mesh/weft/ebpf/bpf"
)

// The test binary re-executed in a pod as the sidecar's user:
// attacherEnv attaches to its own cgroup, prints the link ids and blocks on
// stdin (TestSIGKILLLeavesNothingAttached); selfTestEnv runs SelfTest on its
// own cgroup and prints ok.
const (
	attacherEnv = "WEFT_EBPF_TEST_ATTACHER"
	selfTestEnv = "WEFT_EBPF_TEST_SELFTEST"
)

func TestMain(m *testing.M) {
	if os.Getenv(attacherEnv) != "" {
		os.Exit(attacher())
	}
	if os.Getenv(selfTestEnv) != "" {
		os.Exit(selfTest())
	}
	if err := pods.Sweep(); err != nil {
		fmt.Fprintln(os.Stderr, err)
	}
	goleak.VerifyTestMain(m)
}

func selfTest() int {
	cg, err := OwnCgroup()
	if err == nil {
		err = SelfTest(context.Background(), cg)
	}
	if err != nil {
		fmt.Println("error:", err)
		return 1
	}
	fmt.Println("ok")
	return 0
}

func attacher() int {
	cg, err := OwnCgroup()
	if err != nil {
		fmt.Println("error:", err)
		return 1
	}
	r, err := Attach(Config{Cgroup: cg, DNS: true})
	if err != nil {
		fmt.Println("error:", err)
		return 1
	}
	var ids []string
	for _, id := range r.LinkIDs() {
		ids = append(ids, strconv.FormatUint(uint64(id), 10))
	}
	fmt.Println(strings.Join(ids, " "))
	_, _ = bufio.NewReader(os.Stdin).ReadString('\n') // until killed
	return 0
}

func TestConfigValidate(t *testing.T) {
	for _, tc := range []struct {
		name string
		cfg  Config
		err  string // substring; "" = valid
	}{
		{"defaults", Config{Cgroup: "/sys/fs/cgroup/pod"}, ""},
		{"no cgroup", Config{}, "Config.Cgroup is empty"},
		{"relative cgroup", Config{Cgroup: "pod"}, `Config.Cgroup "pod" is not an absolute path`},
		{"dns port is outbound port", Config{Cgroup: "/c", DNS: true, DNSPort: 15001}, "Config.DNSPort 15001 is also Config.OutboundPort"},
		{"same ports without dns", Config{Cgroup: "/c", DNSPort: 15001}, ""},
		{"max conns at the limit", Config{Cgroup: "/c", MaxConns: MaxConnsLimit}, ""},
		{"max conns past the limit", Config{Cgroup: "/c", MaxConns: MaxConnsLimit + 1}, fmt.Sprintf("Config.MaxConns %d is above the limit %d", MaxConnsLimit+1, MaxConnsLimit)},
		{"own addrs at the bound", Config{Cgroup: "/c", OwnAddrs: testAddrs(MaxOwnAddrs)}, ""},
		{"own addrs past the bound", Config{Cgroup: "/c", OwnAddrs: testAddrs(MaxOwnAddrs + 1)}, fmt.Sprintf("Config.OwnAddrs has %d addresses, more than MaxOwnAddrs (%d)", MaxOwnAddrs+1, MaxOwnAddrs)},
		{"own addr invalid", Config{Cgroup: "/c", OwnAddrs: []netip.Addr{netip.MustParseAddr("10.0.0.1"), {}}}, "Config.OwnAddrs[1] is not an address"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := tc.cfg.Validate()
			if tc.err == "" {
				if err != nil {
					t.Fatalf("Validate: %v", err)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), tc.err) {
				t.Fatalf("Validate = %v, want an error with %q", err, tc.err)
			}
		})
	}
}

// testAddrs are n distinct addresses of TEST-NET-2 (RFC 5737), no pod's.
func testAddrs(n int) []netip.Addr {
	out := make([]netip.Addr, n)
	for i := range out {
		out[i] = netip.AddrFrom4([4]byte{198, 51, 100, byte(i + 1)})
	}
	return out
}

func TestDefaults(t *testing.T) {
	got := Config{Cgroup: "/c"}.withDefaults()
	want := Config{Cgroup: "/c", OutboundPort: 15001, DNSPort: 15053, ProxyUID: 1337, MaxConns: DefaultMaxConns}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("withDefaults = %+v, want %+v", got, want)
	}
}

func TestMapConfig(t *testing.T) {
	for _, tc := range []struct {
		name string
		cfg  Config
		pr   *probe
		want bpf.RedirectConfig
	}{
		{"outbound only", Config{Cgroup: "/c"}, nil, bpf.RedirectConfig{
			Flags: bpf.RedirectConfigFlagsF_EXCLUDE_UID, ProxyUid: 1337,
			OutboundPort: 0x993a /* 15001 */, DnsPort: 0xcd3a, /* 15053 */
		}},
		{"dns and mark", Config{Cgroup: "/c", DNS: true, ExcludeMark: 0x539, ProxyUID: 7, OutboundPort: 0x0102, DNSPort: 0x0304}, nil, bpf.RedirectConfig{
			Flags: bpf.RedirectConfigFlagsF_EXCLUDE_UID | bpf.RedirectConfigFlagsF_DNS, ProxyUid: 7, ExcludeMark: 0x539,
			OutboundPort: 0x0201, DnsPort: 0x0403,
		}},
		{"probe only", Config{Cgroup: "/c", DNS: true}, &probe{addr: netip.MustParseAddrPort("192.0.2.1:9"), to: 40000}, bpf.RedirectConfig{
			Flags: bpf.RedirectConfigFlagsF_PROBE_ONLY, ProxyUid: 1337,
			OutboundPort: 0x993a, DnsPort: 0xcd3a,
			ProbeIp4: 0x010200c0, ProbePort: 0x0900, ProbeToPort: 0x409c, /* 40000 */
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := mapConfig(tc.cfg.withDefaults(), tc.pr); got != tc.want {
				t.Fatalf("mapConfig = %+v, want %+v", got, tc.want)
			}
		})
	}
}

func TestCheckCgroupRefusesNonCgroupAndRoot(t *testing.T) {
	err := CheckCgroup(t.TempDir())
	if err == nil || !strings.Contains(err.Error(), "is not a cgroup v2 directory") {
		t.Fatalf("CheckCgroup(tmp) = %v", err)
	}
	if err := CheckCgroup("/nonexistent-weft"); err == nil || !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("CheckCgroup(missing) = %v", err)
	}
	root, err := CgroupMount()
	if err != nil {
		t.Skipf("no cgroup2 mount here: %v", err)
	}
	err = CheckCgroup(root)
	if err == nil || !strings.Contains(err.Error(), "refusing to attach at the cgroup v2 root") {
		t.Fatalf("CheckCgroup(root) = %v", err)
	}
	// Attach checks before loading anything.
	if _, err := Attach(Config{Cgroup: root}); err == nil || !strings.Contains(err.Error(), "cgroup v2 root") {
		t.Fatalf("Attach(root) = %v", err)
	}
}

// TestVerifierErrorFails: requirePrivileged turns a verifier error into a
// failure; here a real one (a program that never sets R0) is classified.
func TestVerifierErrorFails(t *testing.T) {
	requireBPF(t)
	_, err := ebpf.NewProgram(&ebpf.ProgramSpec{
		Type:         ebpf.CGroupSockAddr,
		AttachType:   ebpf.AttachCGroupInet4Connect,
		License:      "GPL",
		Instructions: asm.Instructions{asm.Return()},
	})
	var ve *ebpf.VerifierError
	if !errors.As(err, &ve) {
		t.Fatalf("loading an invalid program: %v, want a verifier error", err)
	}
	if skippable(fmt.Errorf("load: %w", err)) {
		t.Fatal("a verifier error would be skipped")
	}
	if !skippable(fmt.Errorf("load: %w", os.ErrPermission)) {
		t.Fatal("a permission error would not be skipped")
	}
}

func TestPortOrder(t *testing.T) {
	if htons(15001) != 0x993a || ntohs(0x993a) != 15001 {
		t.Fatalf("htons(15001) = %#x, ntohs = %d", htons(15001), ntohs(0x993a))
	}
	if got := nativeFromBE([4]byte{127, 0, 0, 1}); got != 0x0100007f {
		t.Fatalf("nativeFromBE(127.0.0.1) = %#x", got)
	}
}

// tcpAddrPort is a conn's address as an AddrPort with IPv4-mapped unmapped.
func tcpAddrPort(a net.Addr) netip.AddrPort {
	switch a := a.(type) {
	case *net.TCPAddr:
		ap := a.AddrPort()
		return netip.AddrPortFrom(ap.Addr().Unmap(), ap.Port())
	case *net.UDPAddr:
		ap := a.AddrPort()
		return netip.AddrPortFrom(ap.Addr().Unmap(), ap.Port())
	}
	return netip.AddrPort{}
}

func TestOwnCgroup(t *testing.T) {
	for _, tc := range []struct{ name, procCgroup, want, err string }{
		{"v2 only", "0::/pods/a\n", "/mnt/cg/pods/a", ""},
		{"hybrid", "1:cpu:/\n4:memory:/x\n0::/pods/b\n", "/mnt/cg/pods/b", ""},
		{"namespace root", "0::/\n", "", "root of this process's cgroup namespace"},
		{"v1 only", "1:cpu:/\n", "", "no cgroup v2 (0::) line"},
		{"odd path", "0::pods\n", "", `unexpected path "pods"`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := ownCgroup("/mnt/cg", []byte(tc.procCgroup))
			if tc.err != "" {
				if err == nil || !strings.Contains(err.Error(), tc.err) {
					t.Fatalf("ownCgroup = %q, %v; want error %q", got, err, tc.err)
				}
				return
			}
			if err != nil || got != tc.want {
				t.Fatalf("ownCgroup = %q, %v; want %q", got, err, tc.want)
			}
		})
	}
}
