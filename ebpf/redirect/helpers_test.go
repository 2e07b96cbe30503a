//go:build linux

package redirect

import (
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/features"

	"github.com/weft-mesh/weft/conformance/pods"
)

// requireBPF skips (fails with WEFT_REQUIRE_PRIVILEGED=1) unless pods can be
// made and BPF loaded here. A verifier error is the programs' bug: a failure,
// never a skip.
func requireBPF(t testing.TB) {
	t.Helper()
	pods.Require(t)
	err := loadCheck()
	if err == nil {
		return
	}
	if !skippable(err) {
		t.Fatalf("the programs do not pass the verifier: %+v", err)
	}
	if os.Getenv(pods.RequireEnv) == "1" {
		t.Fatalf("BPF cannot be loaded here (%s=1 forbids skipping): %v", pods.RequireEnv, err)
	}
	t.Skipf("BPF cannot be loaded here: %v", err)
}

// skippable says whether err is the environment's (no privilege, no BPF)
// rather than the programs' (a verifier error).
func skippable(err error) bool {
	var ve *ebpf.VerifierError
	return !errors.As(err, &ve)
}

// loadCheck: the program types, then the objects themselves.
func loadCheck() error {
	for _, pt := range []ebpf.ProgramType{ebpf.CGroupSockAddr, ebpf.SockOps, ebpf.CGroupSockopt, ebpf.CGroupSock} {
		if err := features.HaveProgramType(pt); err != nil {
			return fmt.Errorf("program type %s: %w", pt, err)
		}
	}
	return Check()
}

// enterCgroup moves this test process into dir until cleanup, so the sockets
// its goroutines make are the pod's. Call it after AddPod: its cleanup (back
// to where it was) must run before the pod's removal kills the pod's cgroup.
func enterCgroup(t testing.TB, dir string) {
	t.Helper()
	orig, err := currentCgroup()
	if err != nil {
		t.Fatal(err)
	}
	if err := writeProcs(dir, os.Getpid()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := writeProcs(orig, os.Getpid()); err != nil {
			// Staying would have the pod's removal kill this process.
			fmt.Fprintf(os.Stderr, "cannot leave cgroup %s: %v\n", dir, err)
			os.Exit(2)
		}
	})
}

// currentCgroup is this process's cgroup directory, the root included
// (OwnCgroup refuses that one).
func currentCgroup() (string, error) {
	mount, err := CgroupMount()
	if err != nil {
		return "", err
	}
	b, err := os.ReadFile("/proc/self/cgroup")
	if err != nil {
		return "", err
	}
	for _, line := range strings.Split(string(b), "\n") {
		if p, ok := strings.CutPrefix(line, "0::"); ok {
			return filepath.Join(mount, p), nil
		}
	}
	return "", errors.New("no cgroup v2 line in /proc/self/cgroup")
}

func writeProcs(dir string, pid int) error {
	return os.WriteFile(filepath.Join(dir, "cgroup.procs"), []byte(strconv.Itoa(pid)), 0)
}

// doer runs code in a network namespace (a pods.Pod or Node).
type doer interface{ Do(func() error) error }

// listen listens in ns without MPTCP, as the sidecar's listeners do.
func listen(t testing.TB, ns doer, network, addr string) net.Listener {
	t.Helper()
	var ln net.Listener
	if err := ns.Do(func() (err error) {
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

// dial dials from ns with d (nil: a plain dialer).
func dial(ns doer, network, addr string, d *net.Dialer) (net.Conn, error) {
	var c net.Conn
	err := ns.Do(func() (err error) {
		if d == nil {
			d = &net.Dialer{Timeout: ioTimeout}
		}
		c, err = d.Dial(network, addr)
		return err
	})
	return c, err
}

const ioTimeout = 5 * time.Second
