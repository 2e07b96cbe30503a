package bpf

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"go.uber.org/goleak"

	"github.com/weft-mesh/weft/ebpf/bpf/internal/srcsum"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

const regenerate = "run `make generate` (clang, llvm, libbpf-dev) and commit the output"

// TestObjectMatchesSource: the committed object was generated from the
// committed C source and bpf2go line, and has not been changed since.
func TestObjectMatchesSource(t *testing.T) {
	genGo := read(t, "gen.go")
	got, err := srcsum.Source(genGo, read(t, "redirect.c"))
	if err != nil {
		t.Fatal(err)
	}
	if got != SourceSHA256 {
		t.Fatalf("redirect.c or the bpf2go line of gen.go changed since redirect_bpfel.o was generated (digest %s, recorded %s): %s", got, SourceSHA256, regenerate)
	}
	if got := srcsum.Bytes(read(t, "redirect_bpfel.o")); got != ObjectSHA256 {
		t.Fatalf("redirect_bpfel.o is not the generated object (digest %s, recorded %s): %s", got, ObjectSHA256, regenerate)
	}
}

// TestRegenerateIsIdentical runs bpf2go again into a temporary directory
// when the recorded clang is here, and compares bytes.
func TestRegenerateIsIdentical(t *testing.T) {
	out, err := exec.Command("clang", "--version").Output()
	if err != nil && os.Getenv("WEFT_REQUIRE_PRIVILEGED") == "1" {
		t.Fatalf("no clang here (%v), and WEFT_REQUIRE_PRIVILEGED=1 (CI installs it)", err)
	}
	if err != nil {
		t.Skipf("no clang here (%v): only the recorded digests are checked (TestObjectMatchesSource)", err)
	}
	if v, _, _ := strings.Cut(string(out), "\n"); strings.TrimSpace(v) != Compiler {
		t.Skipf("clang here is %q, the object was built by %q: bytes may differ", strings.TrimSpace(v), Compiler)
	}
	cmdline, err := srcsum.Command(read(t, "gen.go"))
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	args := append([]string{"tool", "bpf2go", "-output-dir", dir}, strings.Fields(strings.TrimPrefix(cmdline, srcsum.GeneratePrefix))...)
	cmd := exec.Command("go", args...)
	cmd.Env = append(cleanEnv(), "GOPACKAGE=bpf")
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("go %s: %v\n%s", strings.Join(args, " "), err, out)
	}
	for _, f := range []string{"redirect_bpfel.o", "redirect_bpfel.go"} {
		if !bytes.Equal(read(t, filepath.Join(dir, f)), read(t, f)) {
			t.Errorf("%s regenerated differs from the committed one: %s", f, regenerate)
		}
	}
}

// cleanEnv is the environment without bpf2go's own knobs, which would change the output.
func cleanEnv() []string {
	var env []string
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "BPF2GO_") && !strings.HasPrefix(kv, "GOPACKAGE=") {
			env = append(env, kv)
		}
	}
	return env
}

func read(t *testing.T, name string) []byte {
	t.Helper()
	b, err := os.ReadFile(name)
	if err != nil {
		t.Fatal(err)
	}
	return b
}
