//go:build weftpprof

package admin

import (
	"fmt"
	"net/http"
	goruntime "runtime"
	"runtime/pprof"
	"strconv"
	"time"
)

const pprofBuilt = true

// pprofRoutes serves the profiler for go tool pprof: /debug/pprof/profile (CPU)
// and runtime/pprof's named profiles. Two small handlers rather than
// net/http/pprof, which also registers itself on http.DefaultServeMux at init.
func pprofRoutes(mux *http.ServeMux) {
	mux.HandleFunc("GET /debug/pprof/profile", cpuProfile)
	mux.HandleFunc("GET /debug/pprof/{name}", namedProfile)
}

// cpuProfile serves a CPU profile of ?seconds=N (default 10, 1..MaxProfileSeconds).
func cpuProfile(w http.ResponseWriter, r *http.Request) {
	secs, err := profileSeconds(r.URL.Query().Get("seconds"))
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	w.Header().Set("Content-Type", "application/octet-stream")
	if err := pprof.StartCPUProfile(w); err != nil {
		http.Error(w, "cpu profile: "+err.Error(), http.StatusConflict)
		return
	}
	t := time.NewTimer(time.Duration(secs) * time.Second)
	select {
	case <-t.C:
	case <-r.Context().Done():
		t.Stop()
	}
	pprof.StopCPUProfile()
}

// profileSeconds parses ?seconds= of a CPU profile ("" is 10).
func profileSeconds(v string) (int, error) {
	if v == "" {
		return 10, nil
	}
	n, err := strconv.Atoi(v)
	if err != nil || n < 1 || n > MaxProfileSeconds {
		return 0, fmt.Errorf("seconds: %q, want 1..%d", v, MaxProfileSeconds)
	}
	return n, nil
}

// namedProfile serves runtime/pprof's named profiles (heap, allocs, goroutine,
// block, mutex, threadcreate) in the proto format go tool pprof reads; ?debug=1
// or 2 gives the text forms.
func namedProfile(w http.ResponseWriter, r *http.Request) {
	p := pprof.Lookup(r.PathValue("name"))
	if p == nil {
		http.Error(w, fmt.Sprintf("unknown profile %q", r.PathValue("name")), http.StatusNotFound)
		return
	}
	debug, _ := strconv.Atoi(r.URL.Query().Get("debug"))
	if debug < 0 || debug > 2 {
		debug = 0
	}
	if r.URL.Query().Get("gc") != "" && p.Name() == "heap" {
		goruntime.GC()
	}
	if debug == 0 {
		w.Header().Set("Content-Type", "application/octet-stream")
	} else {
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	}
	_ = p.WriteTo(w, debug)
}
