package version

import (
	"os"
	"regexp"
	"runtime/debug"
	"strings"
	"testing"

	"go.uber.org/goleak"

	"github.com/weft-mesh/weft/internal/version/versiontest"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func TestDescribe(t *testing.T) {
	vcs := func(rev, modified string) *debug.BuildInfo {
		bi := &debug.BuildInfo{GoVersion: "go1.26.8", Main: debug.Module{Path: "github.com/weft-mesh/weft", Version: "(devel)"}}
		if rev != "" {
			bi.Settings = append(bi.Settings, debug.BuildSetting{Key: "vcs", Value: "git"}, debug.BuildSetting{Key: "vcs.revision", Value: rev})
		}
		if modified != "" {
			bi.Settings = append(bi.Settings, debug.BuildSetting{Key: "vcs.modified", Value: modified})
		}
		return bi
	}
	const rev = "0d6b4d9c1a2b3c4d5e6f708192a3b4c5d6e7f809"
	released := vcs("", "")
	released.Main.Version = "v0.3.0"
	tests := []struct {
		name string
		v    string
		bi   *debug.BuildInfo
		want string
	}{
		{"ldflags wins over build info", "v1.2.3-4-gabcdef0-dirty", vcs(rev, "true"), "v1.2.3-4-gabcdef0-dirty (revision 0d6b4d9c1a2b, modified, go1.26.8)"},
		{"checkout, clean", "", vcs(rev, "false"), "(devel) (revision 0d6b4d9c1a2b, go1.26.8)"},
		{"checkout, modified", "", vcs(rev, "true"), "(devel) (revision 0d6b4d9c1a2b, modified, go1.26.8)"},
		{"short revision kept whole", "", vcs("abc123", "false"), "(devel) (revision abc123, go1.26.8)"},
		{"go install @version: no vcs stamp", "", released, "v0.3.0 (revision unknown, go1.26.8)"},
		{"-buildvcs=false", "", vcs("", ""), "(devel) (revision unknown, go1.26.8)"},
		{"no build info at all", "", nil, "(unknown) (revision unknown)"},
		{"no build info, ldflags set", "v9", nil, "v9 (revision unknown)"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := Describe(tt.v, tt.bi); got != tt.want {
				t.Errorf("Describe(%q) = %q, want %q", tt.v, got, tt.want)
			}
		})
	}
}

// The test binary has build info (its main module is this one): String names the
// program and the Go version it was built with.
func TestStringFromThisBinary(t *testing.T) {
	bi, ok := debug.ReadBuildInfo()
	if !ok {
		t.Fatal("test binary has no build info")
	}
	got := String("weft-test")
	if !strings.HasPrefix(got, "weft-test ") || !strings.Contains(got, bi.GoVersion) {
		t.Errorf("String = %q, want program name and %s", got, bi.GoVersion)
	}
}

// `make build` links the version in: the -X name must be this package's variable.
func TestMakefileSetsVersion(t *testing.T) {
	mk, err := os.ReadFile("../../Makefile")
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(mk), "-X "+versiontest.VarFlag+"=$(VERSION)") {
		t.Errorf("Makefile LDFLAGS do not set %s", versiontest.VarFlag)
	}
	for _, cmd := range []string{"pilot", "sidecar", "meshctl"} {
		if !regexp.MustCompile(`(?m)^\t.* -ldflags "\$\(LDFLAGS\)" -o \$\(BIN\)/` + cmd + ` `).Match(mk) {
			t.Errorf("Makefile builds %s without $(LDFLAGS)", cmd)
		}
	}
}
