package authz

import (
	"strings"
	"testing"
)

func TestNormalPath(t *testing.T) {
	for p, want := range map[string]bool{
		"/":              true,
		"/reviews/1":     true,
		"/reviews/":      true,
		"/a/b.c/d..e/.f": true,
		"/a%20b":         true, // space: reserved-free but not unreserved
		"/a%3Fb":         true, // "?" encoded stays data
		"/a?x=//../%2F":  true, // the query is not the path
		"/a#/../x":       true,
		"":               false,
		"reviews":        false,
		"*":              false,
		"http://h/a":     false,
		"//admin":        false,
		"/a//b":          false,
		"/./admin":       false,
		"/a/../admin":    false,
		"/a/..":          false,
		"/a/.":           false,
		"/..":            false,
		"/%61dmin":       false, // "a"
		"/admin%2Fx":     false, // "/"
		"/admin%2fx":     false,
		"/admin%5Cx":     false, // "\"
		"/%2e%2e/admin":  false, // ".."
		"/a\\b":          false,
		"/a%":            false,
		"/a%2":           false,
		"/a%zz":          false,
		"/a%7E":          false, // "~"
		"/caf%C3%A9":     true,  // UTF-8 bytes stay encoded
	} {
		if got := NormalPath(p); got != want {
			t.Errorf("NormalPath(%q) = %v, want %v", p, got, want)
		}
	}
	if n := testing.AllocsPerRun(100, func() { NormalPath("/reviews/a%20b/c?x") }); n != 0 {
		t.Errorf("NormalPath allocates %v", n)
	}
}

func TestUsesPaths(t *testing.T) {
	for _, tc := range []struct {
		cfg  Config
		want bool
	}{
		{filters(allow(pol("a", []Permission{anyPerm()}, []Principal{anyID()}))), false},
		{filters(allow(pol("a", []Permission{andRules(method("GET"), orRules(path(Prefix, "/a/")))}, []Principal{anyID()}))), true},
		{filters(shadow(Deny, pol("a", []Permission{notRule(path(Exact, "/a"))}, []Principal{anyID()}))), true},
		{filters(), false},
	} {
		e, err := New(tc.cfg, nil, t0)
		if err != nil {
			t.Fatal(err)
		}
		if got := e.UsesPaths(); got != tc.want {
			t.Errorf("UsesPaths(%+v) = %v, want %v", tc.cfg, got, tc.want)
		}
	}
}

func FuzzNormalPath(f *testing.F) {
	for _, s := range []string{"/a/b", "//a", "/%2e", "/a?b", "/a/./b"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, p string) {
		if !NormalPath(p) {
			return
		}
		// A normal path has no segment a decoder or resolver would change.
		q := p
		if i := strings.IndexAny(q, "?#"); i >= 0 {
			q = q[:i]
		}
		for _, bad := range []string{"//", "/./", "/../", "\\", "%2f", "%2F", "%2e", "%2E"} {
			if strings.Contains(q, bad) {
				t.Fatalf("NormalPath(%q) = true with %q", p, bad)
			}
		}
		if strings.HasSuffix(q, "/.") || strings.HasSuffix(q, "/..") {
			t.Fatalf("NormalPath(%q) = true with a dot segment at the end", p)
		}
	})
}
