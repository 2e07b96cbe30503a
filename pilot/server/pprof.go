package server

import (
	"net/http"
	"net/http/pprof"
)

// PprofPath is where the admin API serves Go's profiles with
// Config.AdminPprof (pilot --admin-pprof).
const PprofPath = "/debug/pprof/"

// pprofHandler serves net/http/pprof's endpoints under PprofPath. It is
// mounted on the admin API, so the admin API's own authorisation (loopback, or
// the bearer token) guards it; it is off unless asked for, as a CPU profile
// costs pilot while it runs and a heap profile shows internals.
func pprofHandler() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc(PprofPath, pprof.Index) // also the named profiles: heap, allocs, goroutine, mutex, block
	mux.HandleFunc(PprofPath+"cmdline", pprof.Cmdline)
	mux.HandleFunc(PprofPath+"profile", pprof.Profile)
	mux.HandleFunc(PprofPath+"symbol", pprof.Symbol)
	mux.HandleFunc(PprofPath+"trace", pprof.Trace)
	return mux
}
