//go:build linux

package redirect

// A minimal netns + cgroup harness for this package's privileged tests, until
// conformance/pods lands on main (then these tests move to it and this file
// goes). Names carry the creating PID ("weftebpf<pid>x<n>") so TestMain's
// sweep removes what a killed run left.

import (
	"bufio"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/features"
	"golang.org/x/sys/unix"

	"github.com/weft-mesh/weft/ebpf/bpf"
	"github.com/weft-mesh/weft/tools/testkit"
)

const namePrefix = "weftebpf"

var seq atomic.Int32

func uniqueName() string {
	return fmt.Sprintf("%s%dx%d", namePrefix, os.Getpid(), seq.Add(1))
}

// requirePrivileged skips (fails with WEFT_REQUIRE_PRIVILEGED=1) unless the
// tests can make a netns and a cgroup and load BPF. A verifier error is a
// bug, never a reason to skip.
func requirePrivileged(t *testing.T) {
	t.Helper()
	reason := privileged()
	if reason == nil {
		return
	}
	if !skippable(reason) {
		t.Fatalf("the programs do not pass the verifier: %+v", reason)
	}
	if os.Getenv("WEFT_REQUIRE_PRIVILEGED") == "1" {
		t.Fatalf("privileged test cannot run (WEFT_REQUIRE_PRIVILEGED=1): %v", reason)
	}
	t.Skipf("privileged test skipped: %v", reason)
}

// skippable says whether err is the environment's (no privilege, no BPF)
// rather than the programs' (a verifier error).
func skippable(err error) bool {
	var ve *ebpf.VerifierError
	return !errors.As(err, &ve)
}

func privileged() error {
	if os.Geteuid() != 0 {
		return errors.New("not root")
	}
	if _, err := exec.LookPath("ip"); err != nil {
		return errors.New("no ip command")
	}
	if err := onThread(func() error { return unix.Unshare(unix.CLONE_NEWNET) }); err != nil {
		return fmt.Errorf("cannot create a network namespace: %w", err)
	}
	if _, err := cgroupRoot(); err != nil {
		return err
	}
	return loadCheck()
}

// loadCheck loads the objects once: errors other than a verifier error say
// the environment cannot run BPF.
func loadCheck() error {
	for _, pt := range []ebpf.ProgramType{ebpf.CGroupSockAddr, ebpf.SockOps, ebpf.CGroupSockopt, ebpf.CGroupSock} {
		if err := features.HaveProgramType(pt); err != nil {
			return fmt.Errorf("program type %s: %w", pt, err)
		}
	}
	var objs bpf.RedirectObjects
	if err := bpf.LoadRedirectObjects(&objs, nil); err != nil {
		return fmt.Errorf("load: %w", err)
	}
	return objs.Close()
}

// onThread runs fn on a locked OS thread that is thrown away afterwards, so
// whatever fn does to the thread (setns, unshare) never reaches another goroutine.
func onThread(fn func() error) error {
	errc := make(chan error, 1)
	go func() {
		runtime.LockOSThread() // never unlocked: the thread dies with the goroutine
		errc <- fn()
	}()
	return <-errc
}

// cgroupRoot is the cgroup2 mount point, from mountinfo.
func cgroupRoot() (string, error) {
	b, err := os.ReadFile("/proc/self/mountinfo")
	if err != nil {
		return "", err
	}
	for _, line := range strings.Split(string(b), "\n") {
		f := strings.Fields(line)
		for i, x := range f {
			if x == "-" && i+1 < len(f) && f[i+1] == "cgroup2" && f[3] == "/" {
				return f[4], nil
			}
		}
	}
	return "", errors.New("no cgroup2 mount")
}

// netns is a network namespace with lo up and an interface holding
// upstreamIP and upstreamIP6, so a non-loopback destination exists.
type netns struct{ name string }

var (
	upstreamIP  = "10.250.0.2"
	upstreamIP6 = "fd00:250::2"
)

func newNetns(t *testing.T) *netns {
	t.Helper()
	n := &netns{name: uniqueName()}
	if err := run("ip", "netns", "add", n.name); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := run("ip", "netns", "del", n.name); err != nil {
			t.Error(err)
		}
	})
	for _, args := range [][]string{
		{"link", "set", "lo", "up"},
		{"link", "add", "d0", "type", "veth", "peer", "name", "d1"}, // no dummy module here
		{"link", "set", "d0", "up"},
		{"link", "set", "d1", "up"},
		{"addr", "add", upstreamIP + "/24", "dev", "d0"},
		{"addr", "add", upstreamIP6 + "/64", "dev", "d0", "nodad"},
	} {
		if err := run("ip", append([]string{"-n", n.name}, args...)...); err != nil {
			t.Fatal(err)
		}
	}
	return n
}

// Do runs fn in the namespace; sockets made there stay in it.
func (n *netns) Do(fn func() error) error {
	return onThread(func() error {
		fd, err := unix.Open("/run/netns/"+n.name, unix.O_RDONLY|unix.O_CLOEXEC, 0)
		if err != nil {
			return err
		}
		defer unix.Close(fd)
		if err := unix.Setns(fd, unix.CLONE_NEWNET); err != nil {
			return fmt.Errorf("setns %s: %w", n.name, err)
		}
		return fn()
	})
}

func (n *netns) listen(t *testing.T, network, addr string) net.Listener {
	t.Helper()
	var ln net.Listener
	if err := n.Do(func() (err error) {
		var lc net.ListenConfig
		lc.SetMultipathTCP(false)
		ln, err = lc.Listen(t.Context(), network, addr)
		return err
	}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	return ln
}

func (n *netns) listenUDP(t *testing.T, network, addr string) net.PacketConn {
	t.Helper()
	var pc net.PacketConn
	if err := n.Do(func() (err error) {
		pc, err = net.ListenPacket(network, addr)
		return err
	}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { pc.Close() })
	return pc
}

func (n *netns) dial(network, addr string, d *net.Dialer) (net.Conn, error) {
	var c net.Conn
	err := n.Do(func() (err error) {
		if d == nil {
			d = &net.Dialer{Timeout: 5 * time.Second}
		}
		c, err = d.Dial(network, addr)
		return err
	})
	return c, err
}

// start starts cmd in the namespace (forked from the netns thread). No
// Pdeathsig: it would fire when that thread exits.
func (n *netns) start(t *testing.T, cmd *exec.Cmd) {
	t.Helper()
	if err := n.Do(cmd.Start); err != nil {
		t.Fatal(err)
	}
}

// newCgroup makes a child of the cgroup2 root and removes it at cleanup.
func newCgroup(t *testing.T) string {
	t.Helper()
	root, err := cgroupRoot()
	if err != nil {
		t.Fatal(err)
	}
	dir := filepath.Join(root, uniqueName())
	if err := os.Mkdir(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		// A killed child may take a moment to leave the cgroup.
		if err := testkit.Poll(5*time.Second, func() error {
			if err := unix.Rmdir(dir); err != nil && !errors.Is(err, unix.ENOENT) {
				return err
			}
			return nil
		}); err != nil {
			t.Errorf("remove cgroup %s: %v", dir, err)
		}
	})
	return dir
}

// enterCgroup moves this test process into dir until cleanup, so the
// sockets its goroutines make are the pod's.
func enterCgroup(t *testing.T, dir string) {
	t.Helper()
	orig, err := ownCgroupDir()
	if err != nil {
		t.Fatal(err)
	}
	if err := writeProcs(dir, os.Getpid()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := writeProcs(orig, os.Getpid()); err != nil {
			t.Errorf("move back to %s: %v", orig, err)
		}
	})
}

func writeProcs(dir string, pid int) error {
	return os.WriteFile(filepath.Join(dir, "cgroup.procs"), []byte(strconv.Itoa(pid)), 0)
}

// ownCgroupDir is this process's cgroup v2 directory.
func ownCgroupDir() (string, error) {
	root, err := cgroupRoot()
	if err != nil {
		return "", err
	}
	b, err := os.ReadFile("/proc/self/cgroup")
	if err != nil {
		return "", err
	}
	sc := bufio.NewScanner(strings.NewReader(string(b)))
	for sc.Scan() {
		if p, ok := strings.CutPrefix(sc.Text(), "0::"); ok {
			return filepath.Join(root, p), nil
		}
	}
	return "", errors.New("no cgroup v2 line in /proc/self/cgroup")
}

// sweep removes netns and cgroups of this package's naming whose creating
// process is gone (a killed run).
func sweep() {
	stale := func(name string) bool {
		rest, ok := strings.CutPrefix(name, namePrefix)
		if !ok {
			return false
		}
		pidStr, _, ok := strings.Cut(rest, "x")
		pid, err := strconv.Atoi(pidStr)
		if !ok || err != nil {
			return false
		}
		return unix.Kill(pid, 0) == unix.ESRCH
	}
	if ents, err := os.ReadDir("/run/netns"); err == nil {
		for _, e := range ents {
			if stale(e.Name()) {
				fmt.Fprintf(os.Stderr, "sweeping stale netns %s\n", e.Name())
				_ = run("ip", "netns", "del", e.Name())
			}
		}
	}
	if root, err := cgroupRoot(); err == nil {
		if ents, err := os.ReadDir(root); err == nil {
			for _, e := range ents {
				if e.IsDir() && stale(e.Name()) {
					fmt.Fprintf(os.Stderr, "sweeping stale cgroup %s\n", e.Name())
					_ = unix.Rmdir(filepath.Join(root, e.Name()))
				}
			}
		}
	}
}

func run(name string, args ...string) error {
	out, err := exec.Command(name, args...).CombinedOutput()
	if err != nil {
		return fmt.Errorf("%s %s: %w: %s", name, strings.Join(args, " "), err, out)
	}
	return nil
}

// credential runs a child as uid/gid.
func credential(uid uint32) *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: uid, Gid: uid}}
}
