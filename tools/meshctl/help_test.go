package meshctl_test

import (
	"regexp"
	"strings"
	"testing"

	"github.com/weft-mesh/weft/internal/version"
	"github.com/weft-mesh/weft/pilot/resource"
)

// Every command answers -h, -help and --help with its usage on stdout and exit 0,
// with no pilot to talk to (the --pilot given is closed).
func TestHelp(t *testing.T) {
	cmds := map[string]*regexp.Regexp{ // command words -> the usage line its help starts with
		"apply":          regexp.MustCompile(`^usage: meshctl apply -f PATH \[--if-match GEN\]\n`),
		"get":            regexp.MustCompile(`^usage: meshctl get KIND \[NAME\]`),
		"delete":         regexp.MustCompile(`^usage: meshctl delete KIND NAME`),
		"history":        regexp.MustCompile(`^usage: meshctl history KIND NAME`),
		"validate":       regexp.MustCompile(`^usage: meshctl validate -f PATH\n`),
		"inject":         regexp.MustCompile(`^usage: meshctl inject -f FILE \[--meshconfig FILE\]`),
		"proxy-status":   regexp.MustCompile(`^usage: meshctl proxy-status\n`),
		"rollout status": regexp.MustCompile(`^usage: meshctl rollout status \[REV\]`),
		"rollout":        regexp.MustCompile(`^usage: meshctl rollout status \[REV\]`),
		"config-dump":    regexp.MustCompile(`^usage: meshctl config-dump NODE\n`),
		"outliers":       regexp.MustCompile(`^usage: meshctl outliers \[-o json\]\n`),
	}
	flagsOf := map[string][]string{ // each flag the command has must be in its help
		"apply": {"-f", "-if-match"}, "get": {"-n", "-A", "-o"}, "delete": {"-n", "-if-match"}, "history": {"-n"},
		"validate": {"-f"}, "inject": {"-f", "-meshconfig", "-inject-pilot-addr", "-trust-domain", "-n"}, "rollout status": {"-wait", "-timeout"}, "rollout": {"-wait", "-timeout"}, "outliers": {"-o"},
	}
	for cmd, want := range cmds {
		for _, h := range []string{"-h", "-help", "--help"} {
			args := append([]string{"--pilot", "http://127.0.0.1:1"}, strings.Fields(cmd)...)
			r := run(append(args, h)...)
			if r.code != 0 || r.stderr != "" || !want.MatchString(r.stdout) {
				t.Errorf("meshctl %s %s: exit %d, stdout %q, stderr %q; want exit 0 and %s", cmd, h, r.code, r.stdout, r.stderr, want)
				continue
			}
			for _, f := range flagsOf[cmd] {
				if !strings.Contains(r.stdout, "  "+f+" ") && !strings.Contains(r.stdout, "  "+f+"\t") && !strings.Contains(r.stdout, "  "+f+"\n") {
					t.Errorf("meshctl %s %s: help lacks flag %s:\n%s", cmd, h, f, r.stdout)
				}
			}
			if strings.Contains(r.stdout, "help requested") {
				t.Errorf("meshctl %s %s: %q", cmd, h, r.stdout)
			}
		}
		// "help CMD" says the same as "CMD --help".
		if r, want := run(append([]string{"help"}, strings.Fields(cmd)[0])...), run(append(strings.Fields(cmd), "--help")...); r.code != 0 || r.stdout != want.stdout {
			t.Errorf("meshctl help %s: exit %d, stdout %q; want %q", cmd, r.code, r.stdout, want.stdout)
		}
	}
	// A flag after positional arguments asks for help too.
	if r := run("get", "services", "-n", "shop", "--help"); r.code != 0 || !cmds["get"].MatchString(r.stdout) {
		t.Errorf("get services -n shop --help: exit %d, stdout %q", r.code, r.stdout)
	}
	// The kinds a command takes are listed with their short names.
	r := run("get", "--help")
	for _, k := range resource.Kinds() {
		if !regexp.MustCompile(`(?m)^  ` + k.ShortName + ` +` + k.Kind + `$`).MatchString(r.stdout) {
			t.Errorf("get --help does not list %s (%s):\n%s", k.Kind, k.ShortName, r.stdout)
		}
	}
	for _, args := range [][]string{{"-h"}, {"--help"}, {"help"}, {"--pilot", "http://127.0.0.1:1", "--help"}} {
		r := run(args...)
		if r.code != 0 || r.stderr != "" || !strings.HasPrefix(r.stdout, "usage: meshctl ") {
			t.Errorf("meshctl %q: exit %d stdout %q stderr %q", args, r.code, r.stdout, r.stderr)
		}
		for _, want := range []string{"--version", "rollout status", "config-dump", "outliers", "svc  Service", "dp   DestinationPolicy", "ap   AuthorizationPolicy"} {
			if !strings.Contains(r.stdout, want) {
				t.Errorf("meshctl %q: usage lacks %q", args, want)
			}
		}
	}
	if r := run("help", "frob"); r.code != 2 || !strings.Contains(r.stderr, `unknown command "frob"`) {
		t.Errorf("help frob: exit %d stderr %q", r.code, r.stderr)
	}
	if r := run("get", "--frob"); r.code != 2 || r.stderr != "meshctl: get: flag provided but not defined: -frob (try meshctl get --help)\n" {
		t.Errorf("get --frob: exit %d stderr %q", r.code, r.stderr)
	}
}

func TestVersion(t *testing.T) {
	want := version.String("meshctl") + "\n"
	for _, args := range [][]string{{"--version"}, {"-version"}, {"version"}, {"--pilot", "http://127.0.0.1:1", "--version"}} {
		r := run(args...)
		if r.code != 0 || r.stdout != want || r.stderr != "" {
			t.Errorf("meshctl %q: exit %d stdout %q stderr %q, want %q", args, r.code, r.stdout, r.stderr, want)
		}
	}
}
