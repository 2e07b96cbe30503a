// Package version says which build a Weft binary is. The three commands (pilot,
// sidecar, meshctl) print String for --version.
//
// The Makefile sets Version at link time:
//
//	go build -ldflags "-X github.com/weft-mesh/weft/internal/version.Version=$(git describe --always --dirty)"
//
// Without it (go build, go install, go run) the module's build info answers: its
// version ("(devel)" for a checkout) and, when the go command stamped it, the VCS
// revision and whether the tree had uncommitted changes.
package version

import (
	"runtime/debug"
	"strings"
)

// Version is the release or `git describe` string set by -ldflags -X; empty means
// "ask the build info". It is a link-time setting, never written at run time.
var Version string

// revisionLen shortens VCS revisions, as git's abbreviated hashes (and enough to
// find the commit).
const revisionLen = 12

// String is the one-line --version answer for program, e.g.
// "meshctl v0.3.0 (revision 0d6b4d9c1a2b, modified, go1.26.8)".
func String(program string) string {
	bi, ok := debug.ReadBuildInfo()
	if !ok {
		bi = nil
	}
	return program + " " + Describe(Version, bi)
}

// Describe renders a version set at link time (v, may be empty) and the build
// info (bi, may be nil). It reads only its arguments, so tests cover every case.
func Describe(v string, bi *debug.BuildInfo) string {
	if v == "" && bi != nil {
		v = bi.Main.Version
	}
	if v == "" {
		v = "(unknown)"
	}
	var rev, modified, goVersion string
	if bi != nil {
		goVersion = bi.GoVersion
		for _, s := range bi.Settings {
			switch s.Key {
			case "vcs.revision":
				rev = s.Value
			case "vcs.modified":
				modified = s.Value
			}
		}
	}
	details := make([]string, 0, 3)
	switch {
	case rev == "":
		details = append(details, "revision unknown")
	case len(rev) > revisionLen:
		details = append(details, "revision "+rev[:revisionLen])
	default:
		details = append(details, "revision "+rev)
	}
	if modified == "true" {
		details = append(details, "modified")
	}
	if goVersion != "" {
		details = append(details, goVersion)
	}
	return v + " (" + strings.Join(details, ", ") + ")"
}
