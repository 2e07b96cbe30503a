package proc

import (
	"context"
	"net"
	"net/http"
	"os/exec"
	"testing"
	"time"
)

// Netns runs processes inside a network namespace and dials from inside it:
// conformance/pods' Node and Pod (and Pod.As, for another user) implement it.
// With one, StartIn, StartPilotIn and SidecarConfig.Netns run the real binaries
// that Build built inside the namespace, and this package's own clients (pilot
// readiness, tokens, CSRs, status, metrics) reach them there.
type Netns interface {
	// Command is a command that runs bin with args inside the namespace (a
	// prefix such as `ip netns exec NS setpriv ...`, and the SysProcAttr that
	// puts it in the pod's cgroup).
	Command(bin string, args ...string) *exec.Cmd
	// DialContext dials from inside the namespace.
	DialContext(ctx context.Context, network, addr string) (net.Conn, error)
	// TempDir is a fresh directory, removed when t ends, that the processes
	// Command starts can read and write (their user owns it; the path to it is
	// traversable), for their state and the files given to them.
	TempDir(t testing.TB) string
	// Chown gives the file at path to the user Command runs processes as.
	Chown(path string) error
}

// StartIn is Start inside ns (nil: as Start).
func StartIn(t testing.TB, ns Netns, name, bin string, args ...string) *Proc {
	t.Helper()
	if ns == nil {
		return Start(t, name, bin, args...)
	}
	return start(t, name, ns.Command(bin, args...))
}

// httpClient is a client whose connections are made from inside ns (nil: here),
// without keep-alives (every request a fresh connection: no idle ones left).
func httpClient(ns Netns, timeout time.Duration) *http.Client {
	tr := &http.Transport{DisableKeepAlives: true}
	if ns != nil {
		tr.DialContext = ns.DialContext
	}
	return &http.Client{Timeout: timeout, Transport: tr}
}
