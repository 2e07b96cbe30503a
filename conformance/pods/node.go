package pods

import (
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net/netip"
	"os"
	"path/filepath"
	"strconv"
	"sync"
	"testing"

	"golang.org/x/sys/unix"
)

// The node's test subnets: the bridge (the gateway) is .1, pod i is .(FirstPod+i).
// Addresses need only be unique inside one node, so every node uses the same.
var (
	subnet4 = netip.MustParsePrefix("10.250.0.0/24")
	subnet6 = netip.MustParsePrefix("fd00:250::/64")
)

// FirstPod is the host part of the first pod's addresses (10.250.0.11,
// fd00:250::11); MaxPods bounds the pods of one node (the /24 ends at .254).
const (
	FirstPod = 11
	MaxPods  = 254 - FirstPod + 1
)

// ClusterDomain is the DNS domain of pods' search paths.
const ClusterDomain = "cluster.local"

// Node is a network namespace with a bridge (br0) that pods' veths join. Its
// gateway addresses, on the bridge, are where the test's pilot and upstream DNS
// server listen (they are reachable from every pod); processes run in it as
// root with Command, code of the test with Do.
type Node struct {
	space
	// Name starts the name of everything the node makes: <Prefix><pid>x<random>.
	Name string
	// Gateway and Gateway6 are the bridge's addresses in Subnet and Subnet6,
	// each pod's default route.
	Gateway, Gateway6 netip.Addr
	Subnet, Subnet6   netip.Prefix
	// Dir is the node's directory (mode 0755, removed at the end): binaries and
	// files for its processes.
	Dir string

	cgroup string // the node's cgroup; pods' are its children

	mu      sync.Mutex
	pods    []*Pod
	testBin string // TestBinary's copy
}

// NewNode makes a node; it and every pod of it are removed when t ends. It
// calls Require (a skip or failure when pods cannot be made here).
func NewNode(t testing.TB) *Node {
	t.Helper()
	Require(t)
	n, err := newNode()
	if err != nil {
		t.Fatal(err)
	}
	// Registered before anything exists, so a half-made node is removed too.
	t.Cleanup(func() {
		if err := n.remove(); err != nil {
			t.Errorf("pods: removing node %s: %v", n.Name, err)
		}
	})
	if err := n.make(); err != nil {
		t.Fatalf("pods: making node %s: %v", n.Name, err)
	}
	return n
}

// New makes a node outside a test (tools/demo): nil and why when pods cannot
// be made here (Privileged). The caller must Close it.
func New() (*Node, error) {
	if err := Privileged(); err != nil {
		return nil, err
	}
	n, err := newNode()
	if err != nil {
		return nil, err
	}
	if err := n.make(); err != nil {
		return nil, errors.Join(fmt.Errorf("pods: making node %s: %w", n.Name, err), n.remove())
	}
	return n, nil
}

// Close kills every process of the node and its pods and removes them all.
func (n *Node) Close() error { return n.remove() }

func newNode() (*Node, error) {
	name := fmt.Sprintf("%s%dx%04x", Prefix, os.Getpid(), rand.IntN(1<<16))
	n := &Node{
		Name: name, Subnet: subnet4, Subnet6: subnet6,
		Gateway: hostAddr(subnet4, 1), Gateway6: hostAddr(subnet6, 1),
	}
	n.space = space{ns: name + "-node", cgfd: -1}
	root, err := CgroupRoot()
	if err != nil {
		return nil, err
	}
	n.cgroup = filepath.Join(root, name)
	return n, nil
}

func (n *Node) make() error {
	dir, err := os.MkdirTemp(tmpDir(), n.Name+"-")
	if err != nil {
		return err
	}
	n.Dir = dir
	n.space.dir = dir
	// 0755: processes of other users (uid 1337) run binaries and read files below.
	if err := os.Chmod(dir, 0o755); err != nil {
		return err
	}
	if err := os.Mkdir(n.cgroup, 0o755); err != nil {
		return fmt.Errorf("cgroup: %w", err)
	}
	// The node's own processes in a child: a cgroup with children holds none.
	own := filepath.Join(n.cgroup, "node")
	if err := os.Mkdir(own, 0o755); err != nil {
		return fmt.Errorf("cgroup: %w", err)
	}
	if n.cgfd, err = unix.Open(own, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0); err != nil {
		return fmt.Errorf("cgroup %s: %w", own, err)
	}
	for _, c := range [][]string{
		{"netns", "add", n.ns},
		{"-n", n.ns, "link", "set", "lo", "up"},
		{"-n", n.ns, "link", "add", "br0", "type", "bridge"},
		{"-n", n.ns, "addr", "add", prefixOf(n.Gateway, n.Subnet), "dev", "br0"},
		{"-n", n.ns, "addr", "add", prefixOf(n.Gateway6, n.Subnet6), "dev", "br0", "nodad"},
		{"-n", n.ns, "link", "set", "br0", "up"},
	} {
		if err := run("ip", c...); err != nil {
			return err
		}
	}
	return nil
}

// remove kills what runs in the node and its pods and removes everything;
// what it cannot remove, Sweep will at a later start.
func (n *Node) remove() error {
	n.mu.Lock()
	pods := n.pods
	n.mu.Unlock()
	var errs []error
	for _, p := range pods {
		errs = append(errs, p.remove())
	}
	errs = append(errs, removeCgroup(n.cgroup))
	if n.cgfd >= 0 {
		unix.Close(n.cgfd)
		n.cgfd = -1
	}
	if _, err := os.Stat(filepath.Join(netnsDir, n.ns)); err == nil {
		errs = append(errs, run("ip", "netns", "del", n.ns))
	}
	if n.Dir != "" {
		errs = append(errs, os.RemoveAll(n.Dir))
	}
	return errors.Join(errs...)
}

// DNSAddr is where pods' resolv.conf sends queries: the gateway, port 53 (the
// test's upstream DNS server listens there, in the node: Node.ListenPacket).
func (n *Node) DNSAddr() netip.AddrPort { return netip.AddrPortFrom(n.Gateway, 53) }

// Pods are the node's pods, in the order they were added.
func (n *Node) Pods() []*Pod {
	n.mu.Lock()
	defer n.mu.Unlock()
	return append([]*Pod(nil), n.pods...)
}

// TestBinary is a copy of the running test binary in Dir (mode 0755), which
// another user can run (go test's own is in a 0700 directory): for tests that
// re-exec themselves as a pod's process.
func (n *Node) TestBinary(t testing.TB) string {
	t.Helper()
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.testBin != "" {
		return n.testBin
	}
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	dst := filepath.Join(n.Dir, "test.bin")
	if err := copyFile(self, dst, 0o755); err != nil {
		t.Fatalf("pods: copying the test binary: %v", err)
	}
	n.testBin = dst
	return dst
}

func copyFile(from, to string, mode os.FileMode) error {
	in, err := os.Open(from)
	if err != nil {
		return err
	}
	defer in.Close()
	out, err := os.OpenFile(to, os.O_WRONLY|os.O_CREATE|os.O_EXCL, mode)
	if err != nil {
		return err
	}
	if _, err := io.Copy(out, in); err != nil {
		out.Close()
		return err
	}
	return out.Close()
}

// hostAddr is the address of host number i in p (i < 256).
func hostAddr(p netip.Prefix, i int) netip.Addr {
	if p.Addr().Is4() {
		b := p.Addr().As4()
		b[3] = byte(i)
		return netip.AddrFrom4(b)
	}
	// fd00:250::11 for host 11: the same digits as the IPv4 address, for reading.
	v, err := strconv.ParseUint(strconv.Itoa(i), 16, 16)
	if err != nil {
		panic(err)
	}
	b := p.Addr().As16()
	b[14], b[15] = byte(v>>8), byte(v)
	return netip.AddrFrom16(b)
}

// prefixOf is a with p's length, as ip addr add wants it.
func prefixOf(a netip.Addr, p netip.Prefix) string {
	return netip.PrefixFrom(a, p.Bits()).String()
}
