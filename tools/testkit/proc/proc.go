// Package proc runs the real Weft binaries in tests: it builds bin/pilot,
// bin/sidecar and bin/meshctl as `make build` does (so a test runs the binary
// users run), once per test process, and starts them as processes whose output
// is captured and which are stopped when the test ends.
//
// A package that builds must remove the binaries when its tests end:
//
//	func TestMain(m *testing.M) { goleak.VerifyTestMain(m, goleak.Cleanup(proc.Cleanup)) }
package proc

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/weft-mesh/weft/internal/version/versiontest"
)

// SidecarTags are the build tags of the sidecar (Makefile SIDECAR_BUILD), which is
// also built with CGO_ENABLED=0: the lean, static binary the RSS goals are about.
const SidecarTags = "grpcnotrace"

// Binary is one program of `make build`.
type Binary struct {
	name   string // bin/<name>
	pkg    string // the Makefile's ./<pkg>
	static bool   // $(SIDECAR_BUILD): CGO_ENABLED=0 -tags SidecarTags

	// Set once, by build; a test process shares its binaries (building one takes
	// seconds to a minute), which is why this package holds state at all.
	once sync.Once
	path string
	err  error
}

// The binaries `make build` builds.
var (
	Pilot   = &Binary{name: "pilot", pkg: "pilot/cmd/pilot"}
	Sidecar = &Binary{name: "sidecar", pkg: "sidecar/cmd/sidecar", static: true}
	Meshctl = &Binary{name: "meshctl", pkg: "tools/meshctl/cmd/meshctl"}
)

const module = "github.com/weft-mesh/weft/"

var (
	dirOnce sync.Once
	dir     string // the binaries' directory, removed by Cleanup
	dirErr  error
)

// Build builds b, the first time it is asked for in this test process, with the
// Makefile's flags and the version versiontest.Sentinel linked in, and returns
// its path.
func Build(t testing.TB, b *Binary) string {
	t.Helper()
	dirOnce.Do(func() {
		// 0755: a process started as another user (a pod's sidecar as uid 1337,
		// see Netns) must be able to run the binaries.
		if dir, dirErr = os.MkdirTemp("", "weft-bin-"); dirErr == nil {
			dirErr = os.Chmod(dir, 0o755)
		}
	})
	if dirErr != nil {
		t.Fatalf("proc: binaries directory: %v", dirErr)
	}
	b.once.Do(func() {
		path := filepath.Join(dir, b.name)
		cmd := exec.Command("go", b.args(path)...)
		if b.static {
			cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
		}
		if out, err := cmd.CombinedOutput(); err != nil {
			b.err = fmt.Errorf("proc: building %s: %v\n%s", b.name, err, out)
			return
		}
		b.path = path
	})
	if b.err != nil {
		t.Fatal(b.err)
	}
	return b.path
}

// args are go's arguments to build b into path.
func (b *Binary) args(path string) []string {
	args := []string{"build"}
	if b.static {
		args = append(args, "-tags", SidecarTags)
	}
	return append(args, "-ldflags", "-X "+versiontest.VarFlag+"="+versiontest.Sentinel, "-o", path, module+b.pkg)
}

// Cleanup removes the built binaries; call it when the test process ends (see
// the package comment). The exit code is unused: it fits goleak.Cleanup.
func Cleanup(int) {
	if dir != "" {
		os.RemoveAll(dir)
	}
}

// Buffer is a goroutine-safe log buffer: a process writes it while a test reads.
type Buffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *Buffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *Buffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// StopGrace is how long a process has to exit after SIGTERM before it is
// SIGKILLed when its test ends.
const StopGrace = 10 * time.Second

// KillWait bounds the wait for a process to be gone after SIGKILL.
const KillWait = 20 * time.Second

// Proc is a started process.
type Proc struct {
	Name string
	Cmd  *exec.Cmd
	Logs *Buffer // stdout and stderr
	// Grace is the SIGTERM-to-SIGKILL time when the test ends; Start sets
	// StopGrace, a caller may change it before the test ends.
	Grace time.Duration

	exited chan struct{}
	err    error // Wait's error; written before exited is closed
}

// Start starts bin with args, stdout and stderr into Logs. When the test ends it
// is stopped (Stop(p.Grace)) and, if the test failed, its log is printed.
func Start(t testing.TB, name, bin string, args ...string) *Proc {
	t.Helper()
	return start(t, name, exec.Command(bin, args...))
}

func start(t testing.TB, name string, cmd *exec.Cmd) *Proc {
	t.Helper()
	p := &Proc{Name: name, Cmd: cmd, Logs: &Buffer{}, Grace: StopGrace, exited: make(chan struct{})}
	p.Cmd.Stdout, p.Cmd.Stderr = p.Logs, p.Logs
	// A test binary killed by its timeout runs no Cleanup: without this its
	// children (etcd members, pilots) live on, holding ports, temp dirs and any
	// descriptor they inherited (found: three etcd members of a killed drills
	// run kept running for minutes).
	if p.Cmd.SysProcAttr == nil {
		p.Cmd.SysProcAttr = &syscall.SysProcAttr{}
	}
	if p.Cmd.SysProcAttr.Pdeathsig == 0 {
		p.Cmd.SysProcAttr.Pdeathsig = syscall.SIGKILL
	}
	if err := p.Cmd.Start(); err != nil {
		t.Fatalf("proc: starting %s: %v", name, err)
	}
	go func() { p.err = p.Cmd.Wait(); close(p.exited) }()
	t.Cleanup(func() {
		// How it ended is the test's to check; one that outlives SIGKILL is a leak.
		if err := p.Stop(p.Grace); errors.Is(err, errSurvivedKill) {
			t.Error(err)
		}
		if t.Failed() {
			t.Logf("%s log:\n%s", name, p.Logs.String())
		}
	})
	return p
}

// Exited is closed when the process has exited.
func (p *Proc) Exited() <-chan struct{} { return p.exited }

// Err is how the process ended (nil: exit 0); call it once Exited is closed.
func (p *Proc) Err() error {
	<-p.exited
	return p.err
}

// Stop sends SIGTERM and waits up to grace for the process to exit, then
// SIGKILLs it; it returns how the process ended. A process that had already
// exited is left alone.
func (p *Proc) Stop(grace time.Duration) error {
	select {
	case <-p.exited:
		return p.err
	default:
	}
	_ = p.Cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-p.exited:
		return p.err
	case <-time.After(grace):
	}
	if err := p.Kill(); err != nil {
		return err
	}
	return fmt.Errorf("%s did not exit within %s of SIGTERM: SIGKILLed", p.Name, grace)
}

var errSurvivedKill = errors.New("still running after SIGKILL")

// Kill sends SIGKILL and waits (up to KillWait) for the process to be gone.
func (p *Proc) Kill() error {
	_ = p.Cmd.Process.Signal(syscall.SIGKILL)
	select {
	case <-p.exited:
		return nil
	case <-time.After(KillWait):
		return fmt.Errorf("%s: %w (waited %s)", p.Name, errSurvivedKill, KillWait)
	}
}
