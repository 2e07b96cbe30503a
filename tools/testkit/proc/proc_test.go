package proc

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/weft-mesh/weft/internal/version/versiontest"
	"github.com/weft-mesh/weft/tools/testkit"
)

// childArg as the first argument makes the test binary the process under test.
const childArg = "proc-test-child"

func TestMain(m *testing.M) {
	if len(os.Args) == 3 && os.Args[1] == childArg {
		os.Exit(child(os.Args[2]))
	}
	goleak.VerifyTestMain(m, goleak.Cleanup(Cleanup))
}

// child says on stdout and stderr that it is up, then: "term" exits 0 on
// SIGTERM, "stubborn" ignores SIGTERM, "exit3" exits 3.
func child(mode string) int {
	sigs := make(chan os.Signal, 1)
	signal.Notify(sigs, syscall.SIGTERM)
	fmt.Println("child up")
	fmt.Fprintln(os.Stderr, "child stderr")
	if mode == "exit3" {
		return 3
	}
	for range sigs {
		if mode == "term" {
			fmt.Println("child got SIGTERM")
			return 0
		}
	}
	return 1
}

func startChild(t *testing.T, mode string) *Proc {
	t.Helper()
	p := Start(t, "child-"+mode, os.Args[0], childArg, mode)
	testkit.Eventually(t, 10*time.Second, "the child's output in its log", func() bool {
		return strings.Contains(p.Logs.String(), "child up\n") && strings.Contains(p.Logs.String(), "child stderr\n")
	})
	return p
}

func TestStopGraceful(t *testing.T) {
	p := startChild(t, "term")
	select {
	case <-p.Exited():
		t.Fatal("exited before it was stopped")
	default:
	}
	if err := p.Stop(StopGrace); err != nil {
		t.Fatalf("Stop: %v, want a clean exit", err)
	}
	<-p.Exited()
	if !strings.Contains(p.Logs.String(), "child got SIGTERM") {
		t.Errorf("log %q: the child did not see SIGTERM", p.Logs.String())
	}
	if err := p.Stop(StopGrace); err != nil { // exited: left alone, same answer
		t.Errorf("second Stop: %v", err)
	}
}

func TestStopKillsAfterGrace(t *testing.T) {
	p := startChild(t, "stubborn")
	start := time.Now()
	err := p.Stop(100 * time.Millisecond)
	if err == nil || !strings.Contains(err.Error(), "did not exit within 100ms of SIGTERM") {
		t.Fatalf("Stop: %v, want it to say the child outlived its grace", err)
	}
	if d := time.Since(start); d < 100*time.Millisecond {
		t.Errorf("Stop returned after %s, before the grace ran out", d)
	}
	var ee *exec.ExitError
	if !errors.As(p.Err(), &ee) || ee.Sys().(syscall.WaitStatus).Signal() != syscall.SIGKILL {
		t.Errorf("Err = %v, want killed by SIGKILL", p.Err())
	}
}

func TestExitAndKill(t *testing.T) {
	p := startChild(t, "exit3")
	<-p.Exited()
	var ee *exec.ExitError
	if !errors.As(p.Err(), &ee) || ee.ExitCode() != 3 {
		t.Errorf("Err = %v, want exit status 3", p.Err())
	}

	q := startChild(t, "stubborn")
	if err := q.Kill(); err != nil {
		t.Fatal(err)
	}
	select {
	case <-q.Exited():
	default:
		t.Fatal("Kill returned with the process running")
	}
}

// The cleanup Start registers stops what the test left running.
func TestCleanupStops(t *testing.T) {
	var p *Proc
	t.Run("leaves it running", func(t *testing.T) { p = startChild(t, "term") })
	select {
	case <-p.Exited():
	default:
		t.Fatal("still running after its test ended")
	}
	if err := p.Err(); err != nil {
		t.Errorf("Err = %v, want the clean exit SIGTERM gives", err)
	}
}

func TestBuild(t *testing.T) {
	bin := Build(t, Meshctl)
	if again := Build(t, Meshctl); again != bin {
		t.Errorf("second Build = %s, want the first's %s", again, bin)
	}
	fi, err := os.Stat(bin)
	if err != nil {
		t.Fatal(err)
	}
	Build(t, Meshctl)
	if fi2, err := os.Stat(bin); err != nil || !fi2.ModTime().Equal(fi.ModTime()) {
		t.Errorf("Build rebuilt a binary it had built (%v)", err)
	}
	versiontest.Check(t, bin, "meshctl")
}

// The binaries' directory is one per checkout and user (so the test processes of
// one go test ./... share their binaries), and others may enter it.
func TestBinDirShared(t *testing.T) {
	a, err := binDir()
	if err != nil {
		t.Fatal(err)
	}
	if b, err := binDir(); err != nil || b != a {
		t.Errorf("binDir again = %q, %v; want %q", b, err, a)
	}
	if !strings.HasPrefix(a, os.TempDir()+string(os.PathSeparator)) || !strings.Contains(filepath.Base(a), fmt.Sprint(os.Getuid())) {
		t.Errorf("binDir = %q: want a per-user directory in %s", a, os.TempDir())
	}
	if fi, err := os.Stat(a); err != nil || fi.Mode().Perm() != 0o755 {
		t.Errorf("binDir %s: %v, %v; want mode 0755", a, fi, err)
	}
	if bin := Build(t, Meshctl); filepath.Dir(bin) != a {
		t.Errorf("Build put meshctl in %s, want %s", filepath.Dir(bin), a)
	}
}

// The binaries are built as `make build` builds them: the same packages, flags
// and -ldflags variable, the sidecar static and with SidecarTags.
func TestMatchesMakefile(t *testing.T) {
	mk, err := os.ReadFile("../../../Makefile")
	if err != nil {
		t.Fatal(err)
	}
	def := regexp.MustCompile(`(?m)^SIDECAR_BUILD \?= (.*)$`).FindSubmatch(mk)
	if want := "CGO_ENABLED=0 $(GO) build -tags " + SidecarTags; def == nil || string(def[1]) != want {
		t.Errorf("Makefile SIDECAR_BUILD = %q, want %q", def, want)
	}
	if want := "LDFLAGS ?= -X " + versiontest.VarFlag + "=$(VERSION)\n"; !strings.Contains(string(mk), want) {
		t.Errorf("Makefile lacks %q", want)
	}
	outputs := regexp.MustCompile(`(?m)^\t.* -o \$\(BIN\)/.*$`).FindAll(mk, -1)
	bins := []*Binary{Pilot, Sidecar, Meshctl}
	if len(outputs) != len(bins) {
		t.Errorf("Makefile builds %d binaries, this package %d:\n%s", len(outputs), len(bins), outputs)
	}
	for _, b := range bins {
		build := "$(GO) build"
		if b.static {
			build = "$(SIDECAR_BUILD)"
		}
		line := "\t" + build + ` -ldflags "$(LDFLAGS)" -o $(BIN)/` + b.name + " ./" + b.pkg + "\n"
		if !strings.Contains(string(mk), line) {
			t.Errorf("Makefile build target lacks %q", line)
		}
	}
}

// StartPilot returns a pilot that is healthy, has its key written and takes an
// apply; SIGTERM ends it cleanly.
func TestStartPilot(t *testing.T) {
	p := StartPilot(t, "127.79.9.1", t.TempDir())
	if _, err := os.Stat(p.KeyFile()); err != nil {
		t.Fatalf("publisher key: %v", err)
	}
	p.Apply(t, `apiVersion: mesh.weft.dev/v1alpha1
kind: Service
metadata: {name: reviews, namespace: shop}
spec:
  selector: {app: reviews}
  ports: [{name: http, port: 9080, targetPort: 8080, protocol: HTTP}]
`)
	if err := p.Stop(StopGrace); err != nil {
		t.Fatalf("pilot after SIGTERM: %v\n%s", err, p.Logs.String())
	}
}
