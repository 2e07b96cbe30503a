//go:build linux

package mode

import (
	"encoding/json"
	"fmt"
	"net"
	"net/netip"
	"strings"
	"testing"
	"time"

	"github.com/cilium/ebpf/link"
	"github.com/miekg/dns"
	"golang.org/x/sys/unix"

	"github.com/weft-mesh/weft/conformance/pods"
	"github.com/weft-mesh/weft/tools/testkit"
	"github.com/weft-mesh/weft/tools/testkit/proc"
)

const within = 20 * time.Second

// startSidecar runs the real bin/sidecar in pod as user with --intercept
// req, without a pilot (it is not ready, which does not matter here).
func startSidecar(t *testing.T, node *pods.Node, pod *pods.Pod, user pods.User, req string) *proc.SidecarProcess {
	t.Helper()
	return proc.StartSidecar(t, proc.SidecarConfig{
		NodeID: "app", Namespace: "default", ServiceAccount: "app", Labels: map[string]string{"app": "app"},
		IP: pod.IP.String(), PlainPilot: netip.AddrPortFrom(node.Gateway, 1).String(), Netns: pod.As(user),
		Extra: []string{"--insecure-skip-manifest", "--intercept", req, "--outbound-addr", "127.0.0.1:15001"},
	})
}

// interception is the sidecar's config_dump "interception", once it answers.
func interception(t *testing.T, pod *pods.Pod, sc *proc.SidecarProcess) Decision {
	t.Helper()
	hc := pod.HTTPClient(5 * time.Second)
	var d Decision
	testkit.Wait(t, within, func() error {
		select {
		case <-sc.Exited():
			t.Fatalf("sidecar exited: %v\n%s", sc.Err(), sc.Logs.String())
		default:
		}
		resp, err := hc.Get(sc.AdminURL() + "/config_dump")
		if err != nil {
			return err
		}
		defer resp.Body.Close()
		var cd struct {
			Interception *Decision `json:"interception"`
		}
		if err := json.NewDecoder(resp.Body).Decode(&cd); err != nil {
			return err
		}
		if cd.Interception == nil {
			return fmt.Errorf("config_dump has no interception")
		}
		d = *cd.Interception
		return nil
	})
	return d
}

// TestSidecarEBPF: bin/sidecar --intercept ebpf as uid 1337 with the eBPF
// capabilities in its pod: config_dump and /metrics say ebpf, the pod's app
// (another process of the pod) is redirected to the sidecar and not to where
// it dialled, and the sidecar's SIGKILL leaves nothing attached.
func TestSidecarEBPF(t *testing.T) {
	requireBPF(t)
	node := pods.NewNode(t)
	pod := node.AddPod(t, "app", "")
	sc := startSidecar(t, node, pod, pods.Proxy("net_admin", "bpf", "perfmon"), EBPF)
	if d := interception(t, pod, sc); d.Mode != EBPF || !strings.Contains(d.Reason, "attached to /sys/fs/cgroup/") {
		t.Fatalf("interception %+v, want ebpf attached to the pod's cgroup", d)
	}
	if m, err := sc.Metric(`weft_interception_mode{mode="ebpf"}`); err != nil || m != `weft_interception_mode{mode="ebpf"} 1` {
		t.Fatalf("metric %q, %v", m, err)
	}
	if n := strings.Count(sc.Logs.String(), "interception mode chosen"); n != 1 {
		t.Fatalf("%d 'interception mode chosen' lines, want 1:\n%s", n, sc.Logs.String())
	}
	ino := cgroupIno(t, pod.Cgroup)
	if n := linksOn(t, ino); n == 0 {
		t.Fatal("no link on the pod's cgroup")
	}

	// The app: bash in the pod (root, in the pod's cgroup) dials the node.
	up := node.Listen(t, "tcp4", netip.AddrPortFrom(node.Gateway, 8080).String())
	app := pod.Command("bash", "-c", fmt.Sprintf("exec 3<>/dev/tcp/%s/8080", node.Gateway))
	if out, err := app.CombinedOutput(); err != nil {
		t.Fatalf("app: %v: %s", err, out)
	}
	testkit.Wait(t, within, func() error {
		m, err := sc.Metric(`weft_interception_ebpf_total{event="redirected"}`)
		if err != nil || m != `weft_interception_ebpf_total{event="redirected"} 1` {
			return fmt.Errorf("metric %q, %v", m, err)
		}
		return nil
	})
	_ = up.(*net.TCPListener).SetDeadline(time.Now())
	if c, err := up.Accept(); err == nil {
		c.Close()
		t.Fatalf("the app reached %s directly", up.Addr())
	}

	// DNS: glibc (getent) asks the pod's nameserver, the node's gateway; the
	// query goes to the sidecar's DNS proxy, which forwards it (as uid 1337:
	// not redirected again) to the node's upstream; glibc takes the answer
	// only from the address it asked (recvmsg restores it).
	upstreamDNS(t, node, "outside.example.", net.IPv4(10, 250, 0, 99))
	out, err := pod.Command("getent", "hosts", "outside.example.").CombinedOutput()
	if err != nil || !strings.HasPrefix(string(out), "10.250.0.99 ") {
		t.Fatalf("getent hosts outside.example.: %v: %q", err, out)
	}
	if m, err := sc.Metric(`weft_interception_ebpf_total{event="dns_redirected"}`); err != nil || m == `weft_interception_ebpf_total{event="dns_redirected"} 0` {
		t.Fatalf("metric %q, %v: the query did not go through the DNS proxy", m, err)
	}

	if err := sc.Kill(); err != nil {
		t.Fatal(err)
	}
	testkit.Wait(t, within, func() error {
		if n := linksOn(t, ino); n != 0 {
			return fmt.Errorf("%d links on the pod's cgroup after SIGKILL", n)
		}
		return nil
	})
}

// TestSidecarAutoFallsBack: without the capabilities, --intercept auto runs
// in iptables mode, saying why once.
func TestSidecarAutoFallsBack(t *testing.T) {
	requireBPF(t)
	node := pods.NewNode(t)
	pod := node.AddPod(t, "app", "")
	sc := startSidecar(t, node, pod, pods.Proxy(), Auto)
	d := interception(t, pod, sc)
	if d.Mode != IPTables || !strings.HasPrefix(d.Reason, "auto: eBPF unavailable, iptables rules assumed: ") {
		t.Fatalf("interception %+v, want iptables with the reason", d)
	}
	if m, err := sc.Metric(`weft_interception_mode{mode="iptables"}`); err != nil || m != `weft_interception_mode{mode="iptables"} 1` {
		t.Fatalf("metric %q, %v", m, err)
	}
	logs := sc.Logs.String()
	if n := strings.Count(logs, "interception mode chosen"); n != 1 || !strings.Contains(logs, "mode=iptables reason=") {
		t.Fatalf("want one 'interception mode chosen: mode=iptables reason=...' line:\n%s", logs)
	}
	if n := linksOn(t, cgroupIno(t, pod.Cgroup)); n != 0 {
		t.Fatalf("%d links left by the failed self-test", n)
	}
}

// upstreamDNS answers A queries for name with ip (NXDOMAIN otherwise) on the
// node's DNS address, the pods' nameserver.
func upstreamDNS(t *testing.T, node *pods.Node, name string, ip net.IP) {
	t.Helper()
	srv := &dns.Server{PacketConn: node.ListenPacket(t, "udp4", node.DNSAddr().String()),
		Handler: dns.HandlerFunc(func(w dns.ResponseWriter, r *dns.Msg) {
			m := new(dns.Msg)
			m.SetReply(r)
			if len(r.Question) == 1 && r.Question[0].Name == name {
				if r.Question[0].Qtype == dns.TypeA {
					m.Answer = append(m.Answer, &dns.A{Hdr: dns.RR_Header{Name: name, Rrtype: dns.TypeA, Class: dns.ClassINET, Ttl: 5}, A: ip})
				}
			} else {
				m.Rcode = dns.RcodeNameError
			}
			_ = w.WriteMsg(m)
		})}
	started := make(chan struct{})
	srv.NotifyStartedFunc = func() { close(started) }
	done := make(chan error, 1)
	go func() { done <- srv.ActivateAndServe() }()
	select {
	case <-started:
	case err := <-done:
		t.Fatalf("upstream DNS: %v", err)
	}
	t.Cleanup(func() { _ = srv.Shutdown(); <-done })
}

func cgroupIno(t *testing.T, dir string) uint64 {
	t.Helper()
	var st unix.Stat_t
	if err := unix.Stat(dir, &st); err != nil {
		t.Fatal(err)
	}
	return st.Ino
}

// linksOn counts the kernel's cgroup links on cgroup id ino.
func linksOn(t *testing.T, ino uint64) int {
	t.Helper()
	var it link.Iterator
	defer it.Close()
	n := 0
	for it.Next() {
		if info, err := it.Link.Info(); err == nil {
			if cgi := info.Cgroup(); cgi != nil && cgi.CgroupId == ino {
				n++
			}
		}
	}
	if err := it.Err(); err != nil {
		t.Fatal(err)
	}
	return n
}
