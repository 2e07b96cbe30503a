// Package proc runs the real Weft binaries in tests: it builds bin/pilot,
// bin/sidecar and bin/meshctl as `make build` does (so a test runs the binary
// users run), once per test process, and starts them as processes whose output
// is captured and which are stopped when the test ends.
//
// The binaries go to one directory per module checkout and user, shared by every
// test process of that checkout (see binDir): `go test ./...` runs about twenty
// packages that start binaries, and go build leaves an up-to-date output alone,
// so only the first links (seconds each) and the rest check in about a second.
// TestMain still ends with Cleanup, which removes what is private to the process:
//
//	func TestMain(m *testing.M) { goleak.VerifyTestMain(m, goleak.Cleanup(proc.Cleanup)) }
package proc

import (
	"bytes"
	"crypto/sha256"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
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
	binsDir string // the shared binaries' directory (binDir)
	dirErr  error
)

// binDir is the binaries' directory for this checkout (the module root go env
// GOMOD names) and user: under the temporary directory, which is also where go
// build links, so it moves a relinked binary into place with a rename and a
// process still running the old one keeps it. 0755 so that a process started as
// another user (a pod's sidecar as uid 1337, see Netns) can run the binaries.
func binDir() (string, error) {
	out, err := exec.Command("go", "env", "GOMOD").Output()
	if err != nil {
		return "", fmt.Errorf("go env GOMOD: %w", err)
	}
	gomod := strings.TrimSpace(string(out))
	if gomod == "" || gomod == os.DevNull {
		return "", errors.New("go env GOMOD: not inside the module")
	}
	sum := sha256.Sum256([]byte(filepath.Dir(gomod)))
	d := filepath.Join(os.TempDir(), fmt.Sprintf("weft-testbin-%d-%x", os.Getuid(), sum[:6]))
	if err := os.MkdirAll(d, 0o755); err != nil {
		return "", err
	}
	return d, os.Chmod(d, 0o755)
}

// Build builds b, the first time it is asked for in this test process, with the
// Makefile's flags and the version versiontest.Sentinel linked in, and returns
// its path.
func Build(t testing.TB, b *Binary) string {
	t.Helper()
	b.once.Do(func() {
		var env []string
		if b.static {
			env = []string{"CGO_ENABLED=0"}
		}
		b.path, b.err = GoBuild(b.name, "", env, b.buildArgs()...)
	})
	if b.err != nil {
		t.Fatal(b.err)
	}
	return b.path
}

// GoBuild runs `go build -o <the shared directory>/name args...` in directory
// dir ("": the current one) with env added, and returns the output's path. Test
// processes of one checkout take turns (a lock file beside the binaries), so two
// never write one binary at once. Build uses it; so may a test helper building a
// program of its own (etcdtest's etcd 3.7).
func GoBuild(name, dir string, env []string, args ...string) (string, error) {
	dirOnce.Do(func() { binsDir, dirErr = binDir() })
	if dirErr != nil {
		return "", fmt.Errorf("proc: binaries directory: %w", dirErr)
	}
	path := filepath.Join(binsDir, name)
	lock, err := os.OpenFile(filepath.Join(binsDir, ".lock"), os.O_CREATE|os.O_RDWR, 0o644)
	if err != nil {
		return "", fmt.Errorf("proc: building %s: %w", name, err)
	}
	defer lock.Close() // closing releases the lock
	if err := syscall.Flock(int(lock.Fd()), syscall.LOCK_EX); err != nil {
		return "", fmt.Errorf("proc: building %s: lock %s: %w", name, lock.Name(), err)
	}
	cmd := exec.Command("go", append([]string{"build", "-o", path}, args...)...)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), env...)
	if out, err := cmd.CombinedOutput(); err != nil {
		return "", fmt.Errorf("proc: building %s: %v\n%s", name, err, out)
	}
	return path, nil
}

// buildArgs are go build's arguments for b after -o.
func (b *Binary) buildArgs() []string {
	var args []string
	if b.static {
		args = append(args, "-tags", SidecarTags)
	}
	return append(args, "-ldflags", "-X "+versiontest.VarFlag+"="+versiontest.Sentinel, module+b.pkg)
}

// Cleanup is called when the test process ends (see the package comment). The
// shared binaries stay for the checkout's next test process, as go's build
// cache does; nothing else is private to the process today. The exit code is
// unused: it fits goleak.Cleanup.
func Cleanup(int) {}

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
