//go:build weftpprof

package admin

import (
	"fmt"
	"net/http"
	"strings"
	"testing"
)

// The profiler is served only when Config.Pprof asks for it.
func TestPprofOnlyWhenEnabled(t *testing.T) {
	off := newAdmin(t, &fakeRuntime{}).Handler()
	for _, p := range []string{"/debug/pprof/heap", "/debug/pprof/profile?seconds=1"} {
		if code, _ := get(t, off, p); code != http.StatusNotFound {
			t.Fatalf("pprof off: %s = %d, want 404", p, code)
		}
	}
	a := newAdmin(t, &fakeRuntime{})
	a.cfg.Pprof = true
	on := a.Handler()
	for _, tc := range []struct {
		path string
		code int
		body string // a substring, "" for binary
	}{
		{"/debug/pprof/goroutine?debug=1", http.StatusOK, "goroutine profile:"},
		{"/debug/pprof/heap?gc=1", http.StatusOK, ""},
		{"/debug/pprof/nope", http.StatusNotFound, `unknown profile "nope"`},
		{"/debug/pprof/profile?seconds=1", http.StatusOK, ""},
		{"/debug/pprof/profile?seconds=0", http.StatusBadRequest, "want 1..25"},
		{fmt.Sprintf("/debug/pprof/profile?seconds=%d", MaxProfileSeconds+1), http.StatusBadRequest, "want 1..25"},
	} {
		code, body := get(t, on, tc.path)
		if code != tc.code || !strings.Contains(body, tc.body) || (tc.code == http.StatusOK && len(body) == 0) {
			t.Errorf("%s = %d %.120q, want %d with %q", tc.path, code, body, tc.code, tc.body)
		}
	}
}

func TestProfileSecondsBounds(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want int
		ok   bool
	}{{"", 10, true}, {"1", 1, true}, {fmt.Sprint(MaxProfileSeconds), MaxProfileSeconds, true},
		{fmt.Sprint(MaxProfileSeconds + 1), 0, false}, {"0", 0, false}, {"x", 0, false}} {
		got, err := profileSeconds(tc.in)
		if got != tc.want || (err == nil) != tc.ok {
			t.Errorf("profileSeconds(%q) = %d, %v; want %d, ok %v", tc.in, got, err, tc.want, tc.ok)
		}
	}
}
