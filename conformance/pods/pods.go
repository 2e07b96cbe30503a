// Package pods is the test library for "pods" on one machine (issue #10): a
// Node is a network namespace holding a bridge, whose gateway address (on the
// bridge) is where a pilot and an upstream DNS server of the test run; a Pod is
// a network namespace with a veth to that bridge, an IPv4 and an IPv6 (ULA)
// address, loopback up, a default route via the gateway, a child cgroup of its
// own (under the cgroup2 mount found in /proc/self/mountinfo, never the root)
// and a resolv.conf (/etc/netns/<netns>/resolv.conf, which `ip netns exec`
// mounts over /etc/resolv.conf) naming the node's DNS address with the
// Kubernetes search path of its namespace.
//
// Processes run in a pod with Pod.Command or, as the pod's proxy user, with
// Pod.As(Proxy).Command: `ip netns exec NS [setpriv ...] bin args`, put into the
// pod's cgroup when forked (SysProcAttr.UseCgroupFD, so even its first
// instruction runs there). Pod and Node implement proc.Netns, so
// proc.StartPilotIn and proc.SidecarConfig.Netns start the real binaries there.
// Code of the test itself runs in a pod with Pod.Do (setns on a locked thread
// that is discarded afterwards); sockets made there stay in the pod.
//
// Everything is named <Prefix><pid>x<random>: removed by t.Cleanup (also after a
// failure), and, when a test process died without its cleanups (SIGKILL, the
// -timeout panic), by Sweep at the next start, which removes what processes no
// longer alive made. Nothing is created in or attached to the host's namespace
// or the cgroup root.
//
// Tests that need this call Require first: it skips with the reason when not
// root or no network namespace can be made, or fails instead when
// WEFT_REQUIRE_PRIVILEGED=1 (CI sets it).
package pods

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/weft-mesh/weft/internal/cgroupfs"
)

// RequireEnv, set to 1, turns Require's skips into failures.
const RequireEnv = "WEFT_REQUIRE_PRIVILEGED"

// Prefix starts the name of every netns, cgroup and directory this package
// makes; the creator's PID and 'x' follow.
const Prefix = "wp"

// Require skips t (or fails it, with RequireEnv=1) unless this process can make
// pods: root, the ip and setpriv commands, a cgroup2 mount, and a network
// namespace that can really be created (euid 0 without CAP_SYS_ADMIN cannot).
func Require(t testing.TB) {
	t.Helper()
	if err := Privileged(); err != nil {
		if os.Getenv(RequireEnv) == "1" {
			t.Fatalf("pods: %v (%s=1 forbids skipping)", err, RequireEnv)
		}
		t.Skipf("pods: %v", err)
	}
}

// Privileged is Require's check: nil, or why pods cannot be made here.
func Privileged() error {
	if os.Geteuid() != 0 {
		return fmt.Errorf("not root (euid %d)", os.Geteuid())
	}
	for _, c := range []string{"ip", "setpriv"} {
		if _, err := exec.LookPath(c); err != nil {
			return fmt.Errorf("no %s command: %w", c, err)
		}
	}
	if _, err := CgroupRoot(); err != nil {
		return err
	}
	errc := make(chan error, 1)
	go onNetnsThread(func() error {
		if err := unix.Unshare(unix.CLONE_NEWNET); err != nil {
			return fmt.Errorf("cannot create a network namespace: %w", err)
		}
		return nil // the throw-away namespace goes when the thread leaves it
	}, errc)
	return <-errc
}

// CgroupRoot is the mount point of the cgroup2 (unified) hierarchy
// (internal/cgroupfs: the same the eBPF redirect finds).
func CgroupRoot() (string, error) { return cgroupfs.Mount() }

// run runs a command (ip ...) and wraps its output into the error.
func run(name string, args ...string) error {
	out, err := exec.Command(name, args...).CombinedOutput()
	if err != nil {
		return fmt.Errorf("%s %s: %w: %s", name, strings.Join(args, " "), err, strings.TrimSpace(string(out)))
	}
	return nil
}

// netnsDir is where `ip netns` keeps its namespaces; etcNetns where `ip netns
// exec` finds the files it mounts over /etc.
const (
	netnsDir = "/run/netns"
	etcNetns = "/etc/netns"
)

// tmpDir is where nodes keep their directories (binaries, state of processes).
func tmpDir() string { return os.TempDir() }

// ownerPID is the PID in a name this package made, or 0 when name is not one.
func ownerPID(name string) int {
	rest, ok := strings.CutPrefix(name, Prefix)
	if !ok {
		return 0
	}
	digits, _, ok := strings.Cut(rest, "x")
	if !ok || digits == "" {
		return 0
	}
	pid := 0
	for _, c := range digits {
		if c < '0' || c > '9' {
			return 0
		}
		pid = pid*10 + int(c-'0')
		if pid > 1<<22 {
			return 0
		}
	}
	return pid
}

// alive says whether a process pid exists (a zombie still does: its leftovers
// go at the sweep after the next one).
func alive(pid int) bool {
	err := unix.Kill(pid, 0)
	return err == nil || errors.Is(err, unix.EPERM)
}

// Sweep removes what this package made for processes that are no longer alive:
// network namespaces, /etc/netns directories, cgroups (their processes killed
// first) and temporary directories. Call it in TestMain before m.Run; it
// reports what it removed on stderr and returns the first error. Without
// privileges there is nothing it could have made, and it does nothing.
func Sweep() error {
	if Privileged() != nil {
		return nil
	}
	return sweep(func(pid int) bool { return !alive(pid) })
}

// sweep removes everything made by a PID for which stale says true.
func sweep(stale func(pid int) bool) error {
	var errs []error
	match := func(name string) bool {
		pid := ownerPID(name)
		return pid > 0 && stale(pid)
	}
	if ents, err := os.ReadDir(netnsDir); err == nil {
		for _, e := range ents {
			if match(e.Name()) {
				fmt.Fprintf(os.Stderr, "pods: sweeping stale netns %s\n", e.Name())
				if err := run("ip", "netns", "del", e.Name()); err != nil {
					errs = append(errs, err)
				}
			}
		}
	}
	for _, d := range []string{etcNetns, tmpDir()} {
		ents, err := os.ReadDir(d)
		if err != nil {
			continue
		}
		for _, e := range ents {
			if match(e.Name()) {
				fmt.Fprintf(os.Stderr, "pods: sweeping stale %s\n", filepath.Join(d, e.Name()))
				if err := os.RemoveAll(filepath.Join(d, e.Name())); err != nil {
					errs = append(errs, err)
				}
			}
		}
	}
	if root, err := CgroupRoot(); err == nil {
		if ents, err := os.ReadDir(root); err == nil {
			for _, e := range ents {
				if e.IsDir() && match(e.Name()) {
					fmt.Fprintf(os.Stderr, "pods: sweeping stale cgroup %s\n", filepath.Join(root, e.Name()))
					if err := removeCgroup(filepath.Join(root, e.Name())); err != nil {
						errs = append(errs, err)
					}
				}
			}
		}
	}
	return errors.Join(errs...)
}
