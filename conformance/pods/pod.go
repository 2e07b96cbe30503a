package pods

import (
	"errors"
	"fmt"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"golang.org/x/sys/unix"
)

// Pod is a network namespace on a node: eth0 (a veth whose peer is on the
// node's bridge) with IP and IP6, loopback up, default routes via the node's
// gateways, a cgroup of its own and a resolv.conf for its Namespace.
type Pod struct {
	space
	Node *Node
	// Name is the pod's short name (a, b, frontend), Namespace its mesh
	// namespace (its resolv.conf's search path).
	Name, Namespace string
	IP, IP6         netip.Addr
	// Cgroup is the pod's cgroup directory (a child of the node's), where every
	// process of Command runs.
	Cgroup string

	veth string // the node's end
}

// AddPod makes pod name (letters, digits, '-') of mesh namespace ns ("":
// default) on n; it is removed when t ends (with the node at the latest).
func (n *Node) AddPod(t testing.TB, name, ns string) *Pod {
	t.Helper()
	p, err := n.newPod(name, ns)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := p.remove(); err != nil {
			t.Errorf("pods: removing pod %s: %v", p.ns, err)
		}
	})
	if err := p.make(); err != nil {
		t.Fatalf("pods: making pod %s: %v", p.ns, err)
	}
	return p
}

// NewPod is AddPod outside a test: the pod goes with the node's Close, or
// earlier with its own.
func (n *Node) NewPod(name, ns string) (*Pod, error) {
	p, err := n.newPod(name, ns)
	if err != nil {
		return nil, err
	}
	if err := p.make(); err != nil {
		return nil, errors.Join(fmt.Errorf("pods: making pod %s: %w", p.ns, err), p.remove())
	}
	return p, nil
}

// Close kills the pod's processes and removes it (twice is harmless).
func (p *Pod) Close() error { return p.remove() }

// newPod checks name and ns and takes the next addresses; nothing is made yet.
func (n *Node) newPod(name, ns string) (*Pod, error) {
	if name == "" || strings.Trim(name, "abcdefghijklmnopqrstuvwxyz0123456789-") != "" || name == "node" {
		return nil, fmt.Errorf("pods: pod name %q: want lower-case letters, digits and '-', not \"node\"", name)
	}
	if ns == "" {
		ns = "default"
	}
	n.mu.Lock()
	defer n.mu.Unlock()
	for _, p := range n.pods {
		if p.Name == name {
			return nil, fmt.Errorf("pods: node %s already has a pod %q", n.Name, name)
		}
	}
	i := len(n.pods)
	if i >= MaxPods {
		return nil, fmt.Errorf("pods: node %s has %d pods, the most (MaxPods)", n.Name, MaxPods)
	}
	p := &Pod{
		space: space{ns: n.Name + "-" + name, cgfd: -1, dir: n.Dir},
		Node:  n, Name: name, Namespace: ns,
		IP: hostAddr(n.Subnet, FirstPod+i), IP6: hostAddr(n.Subnet6, FirstPod+i),
		Cgroup: filepath.Join(n.cgroup, name),
		veth:   fmt.Sprintf("vp%d", i),
	}
	n.pods = append(n.pods, p)
	return p, nil
}

func (p *Pod) make() error {
	n := p.Node
	if err := os.Mkdir(p.Cgroup, 0o755); err != nil {
		return fmt.Errorf("cgroup: %w", err)
	}
	var err error
	if p.cgfd, err = unix.Open(p.Cgroup, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0); err != nil {
		return fmt.Errorf("cgroup %s: %w", p.Cgroup, err)
	}
	for _, c := range [][]string{
		{"netns", "add", p.ns},
		{"-n", p.ns, "link", "set", "lo", "up"},
		{"-n", n.ns, "link", "add", p.veth, "type", "veth", "peer", "name", "eth0", "netns", p.ns},
		{"-n", n.ns, "link", "set", p.veth, "master", "br0", "up"},
		{"-n", p.ns, "addr", "add", prefixOf(p.IP, n.Subnet), "dev", "eth0"},
		// nodad: usable at once, not "tentative" for a second or two.
		{"-n", p.ns, "addr", "add", prefixOf(p.IP6, n.Subnet6), "dev", "eth0", "nodad"},
		{"-n", p.ns, "link", "set", "eth0", "up"},
		{"-n", p.ns, "route", "add", "default", "via", n.Gateway.String()},
		{"-n", p.ns, "-6", "route", "add", "default", "via", n.Gateway6.String()},
	} {
		if err := run("ip", c...); err != nil {
			return err
		}
	}
	if err := os.MkdirAll(p.etcDir(), 0o755); err != nil {
		return err
	}
	return os.WriteFile(filepath.Join(p.etcDir(), "resolv.conf"), []byte(p.ResolvConf()), 0o644)
}

// ResolvConf is the pod's /etc/resolv.conf as processes of Command see it:
// the node's DNS address and the Kubernetes search path of the namespace.
func (p *Pod) ResolvConf() string {
	return fmt.Sprintf("nameserver %s\nsearch %s.svc.%s svc.%s %s\noptions ndots:5\n",
		p.Node.DNSAddr().Addr(), p.Namespace, ClusterDomain, ClusterDomain, ClusterDomain)
}

// etcDir holds the files `ip netns exec` mounts over /etc for the pod.
func (p *Pod) etcDir() string { return filepath.Join(etcNetns, p.ns) }

// remove kills the pod's processes and removes it; twice is harmless.
func (p *Pod) remove() error {
	var errs []error
	errs = append(errs, removeCgroup(p.Cgroup))
	if p.cgfd >= 0 {
		unix.Close(p.cgfd)
		p.cgfd = -1
	}
	if _, err := os.Stat(filepath.Join(netnsDir, p.ns)); err == nil {
		// The veth goes with it.
		errs = append(errs, run("ip", "netns", "del", p.ns))
	}
	errs = append(errs, os.RemoveAll(p.etcDir()))
	return errors.Join(errs...)
}

// As runs the pod's processes as u: pod.As(pods.Proxy()) for a sidecar.
func (p *Pod) As(u User) Runner { return Runner{Pod: p, User: u} }

// Addr is the pod's IPv4 address with port.
func (p *Pod) Addr(port uint16) string { return netip.AddrPortFrom(p.IP, port).String() }

// Addr6 is the pod's IPv6 address with port ([fd00:250::11]:port).
func (p *Pod) Addr6(port uint16) string { return netip.AddrPortFrom(p.IP6, port).String() }
