package pods

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// space is a network namespace with a cgroup: what Node and Pod share.
type space struct {
	ns   string // name under /run/netns
	cgfd int    // open cgroup directory its processes start in
	dir  string // the node's directory, parent of TempDir's
}

// NS is the name of the network namespace (`ip netns exec NS ...`).
func (s *space) NS() string { return s.ns }

// Do runs fn on an OS thread inside the namespace. The thread is locked while
// it is there, so no other goroutine ever runs in the namespace by accident.
// Sockets fn makes stay in the namespace and may be used from any goroutine
// afterwards. fn must not start goroutines that make sockets (they would run
// elsewhere) nor resolve names (same reason, and /etc/resolv.conf here is the
// host's: processes of Command see the pod's).
func (s *space) Do(fn func() error) error {
	errc := make(chan error, 1)
	go onNetnsThread(func() error {
		fd, err := unix.Open(filepath.Join(netnsDir, s.ns), unix.O_RDONLY|unix.O_CLOEXEC, 0)
		if err != nil {
			return fmt.Errorf("pods: netns %s: %w", s.ns, err)
		}
		err = unix.Setns(fd, unix.CLONE_NEWNET)
		unix.Close(fd)
		if err != nil {
			return fmt.Errorf("pods: entering netns %s: %w", s.ns, err)
		}
		return fn()
	}, errc)
	return <-errc
}

// onNetnsThread runs fn (which may move the thread to another network
// namespace) on a locked OS thread and sends its error to errc. Then it moves
// the thread back to the namespace it started in and releases it to Go's pool.
// Only when that fails is the thread kept locked, so Go discards it with the
// goroutine: a discarded thread kills every child process forked from it with
// a parent-death signal (tools/testkit/proc sets SIGKILL), and any thread may
// have forked one before this goroutine locked it.
func onNetnsThread(fn func() error, errc chan<- error) {
	runtime.LockOSThread()
	home, err := unix.Open("/proc/thread-self/ns/net", unix.O_RDONLY|unix.O_CLOEXEC, 0)
	if err != nil {
		runtime.UnlockOSThread() // fn did not run: the thread never left
		errc <- fmt.Errorf("pods: this thread's netns: %w", err)
		return
	}
	errc <- fn()
	if unix.Setns(home, unix.CLONE_NEWNET) == nil {
		runtime.UnlockOSThread()
	}
	unix.Close(home)
}

// Listen listens inside the namespace (network tcp, tcp4, tcp6; addr an IP
// literal and port); the listener is closed when t ends.
func (s *space) Listen(t testing.TB, network, addr string) net.Listener {
	t.Helper()
	var ln net.Listener
	if err := s.Do(func() (err error) {
		ln, err = net.Listen(network, addr)
		return err
	}); err != nil {
		t.Fatalf("pods: listening on %s %s in %s: %v", network, addr, s.ns, err)
	}
	t.Cleanup(func() { ln.Close() })
	return ln
}

// ListenPacket is Listen for udp, udp4, udp6.
func (s *space) ListenPacket(t testing.TB, network, addr string) net.PacketConn {
	t.Helper()
	var pc net.PacketConn
	if err := s.Do(func() (err error) {
		pc, err = net.ListenPacket(network, addr)
		return err
	}); err != nil {
		t.Fatalf("pods: listening on %s %s in %s: %v", network, addr, s.ns, err)
	}
	t.Cleanup(func() { pc.Close() })
	return pc
}

// DialContext dials from inside the namespace; addr must be an IP literal and
// port (a name would be resolved outside it).
func (s *space) DialContext(ctx context.Context, network, addr string) (net.Conn, error) {
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return nil, fmt.Errorf("pods: dialing %s: %w", addr, err)
	}
	if _, err := netip.ParseAddr(host); err != nil {
		return nil, fmt.Errorf("pods: dialing %s from %s: an IP literal is needed (a name would be resolved outside the pod)", addr, s.ns)
	}
	var c net.Conn
	err = s.Do(func() (err error) {
		var d net.Dialer
		c, err = d.DialContext(ctx, network, addr)
		return err
	})
	return c, err
}

// Dial is DialContext with DialTimeout.
func (s *space) Dial(network, addr string) (net.Conn, error) {
	ctx, cancel := context.WithTimeout(context.Background(), DialTimeout)
	defer cancel()
	return s.DialContext(ctx, network, addr)
}

// DialTimeout bounds Dial.
const DialTimeout = 5 * time.Second

// HTTPClient is an HTTP client whose connections are made inside the namespace
// (no keep-alives: nothing is left idle), with timeout per request. URLs must
// have IP literals.
func (s *space) HTTPClient(timeout time.Duration) *http.Client {
	return &http.Client{Timeout: timeout, Transport: &http.Transport{DialContext: s.DialContext, DisableKeepAlives: true}}
}

// mountCgroup is what a process of Command runs first, as root, in the mount
// namespace `ip netns exec` made for it: that remounts /sys (so /sys/class/net
// is the pod's), which hides the host's cgroup mounts below it; the cgroup2
// hierarchy goes back at /sys/fs/cgroup, as a container sees it, so a process
// finds its own cgroup (/proc/self/cgroup, mountinfo) to attach eBPF programs to.
// Then it execs the rest (same PID).
const mountCgroup = `mount -t cgroup2 cgroup2 /sys/fs/cgroup || exit 125; exec "$@"`

// command runs bin inside the namespace as u, in the space's cgroup from the
// fork on.
func (s *space) command(u User, bin string, args ...string) *exec.Cmd {
	a := append([]string{"netns", "exec", s.ns, "sh", "-c", mountCgroup, "sh"}, u.setpriv()...)
	a = append(append(a, bin), args...)
	cmd := exec.Command("ip", a...)
	// No Pdeathsig: it fires when the forking thread exits, and Go may retire
	// the thread any time; cleanup kills by PID and the cgroup.
	cmd.SysProcAttr = &syscall.SysProcAttr{UseCgroupFD: true, CgroupFD: s.cgfd}
	return cmd
}

// Command is a command running bin with args in the namespace as root (ip
// netns exec: it sees the namespace's /etc/netns files, and its /sys; the
// cgroup2 hierarchy is at /sys/fs/cgroup), in its cgroup.
func (s *space) Command(bin string, args ...string) *exec.Cmd { return s.command(User{}, bin, args...) }

// TempDir is a fresh directory under the node's Dir (root's; see Runner.TempDir
// for another user's), removed when t ends.
func (s *space) TempDir(t testing.TB) string { return tempDir(t, s.dir, User{}) }

// Chown does nothing: processes of Command run as root.
func (s *space) Chown(string) error { return nil }

func tempDir(t testing.TB, parent string, u User) string {
	t.Helper()
	d, err := os.MkdirTemp(parent, "d")
	if err != nil {
		t.Fatalf("pods: %v", err)
	}
	t.Cleanup(func() { os.RemoveAll(d) })
	if err := os.Chmod(d, 0o755); err != nil {
		t.Fatalf("pods: %v", err)
	}
	if err := os.Chown(d, u.UID, u.GID); err != nil {
		t.Fatalf("pods: %v", err)
	}
	return d
}

// User is whom a process in a pod runs as: the zero User is root (no setpriv);
// otherwise `setpriv --reuid --regid --clear-groups`, keeping Caps as ambient
// capabilities.
type User struct {
	UID, GID int
	// Caps are setpriv's names without CAP_ (net_admin, bpf, perfmon).
	Caps []string
}

// ProxyUID and ProxyGID are the sidecar's identity in pods (the interception
// rules exclude it; bootstrap/intercept.DefaultProxyUID/GID).
const (
	ProxyUID = 1337
	ProxyGID = 1337
)

// Proxy is the sidecar's user with the ambient capabilities caps (none for
// iptables mode; net_admin, bpf, perfmon for eBPF mode).
func Proxy(caps ...string) User { return User{UID: ProxyUID, GID: ProxyGID, Caps: caps} }

func (u User) root() bool { return u.UID == 0 && u.GID == 0 && len(u.Caps) == 0 }

// Setpriv is the command prefix that runs a process as u (nil for root):
// setpriv and its flags, ending with "--".
func (u User) Setpriv() []string { return u.setpriv() }

func (u User) setpriv() []string {
	if u.root() {
		return nil
	}
	a := []string{"setpriv", "--reuid", strconv.Itoa(u.UID), "--regid", strconv.Itoa(u.GID), "--clear-groups"}
	if len(u.Caps) > 0 {
		caps := make([]string, len(u.Caps))
		for i, c := range u.Caps {
			caps[i] = "+" + strings.TrimPrefix(strings.ToLower(c), "cap_")
		}
		a = append(a, "--inh-caps", strings.Join(caps, ","), "--ambient-caps", strings.Join(caps, ","))
	}
	return append(a, "--")
}

// Runner runs processes in a pod as a user: it is the proc.Netns of a sidecar
// (proc.SidecarConfig.Netns = pod.As(pods.Proxy())).
type Runner struct {
	*Pod
	User User
}

// Command runs bin in the pod as r.User.
func (r Runner) Command(bin string, args ...string) *exec.Cmd {
	return r.Pod.command(r.User, bin, args...)
}

// TempDir is a fresh directory owned by r.User, removed when t ends.
func (r Runner) TempDir(t testing.TB) string { return tempDir(t, r.Pod.dir, r.User) }

// Chown gives path to r.User.
func (r Runner) Chown(path string) error {
	if err := os.Chown(path, r.User.UID, r.User.GID); err != nil {
		return fmt.Errorf("pods: %w", err)
	}
	return nil
}
