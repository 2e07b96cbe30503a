// Package api is pilot's admin HTTP API: Kubernetes-shaped REST paths over the
// revisioned store, bulk apply, /healthz and /metrics.
//
// Paths (prefix /apis/mesh.weft.dev/v1alpha1):
//
//	GET    /{plural}                                  list, all namespaces
//	GET    /namespaces/{ns}/{plural}                  list one namespace
//	GET    /namespaces/{ns}/{plural}/{name}           get
//	PUT    /namespaces/{ns}/{plural}/{name}           create or replace (YAML or JSON body)
//	DELETE /namespaces/{ns}/{plural}/{name}           delete
//	GET    /namespaces/{ns}/{plural}/{name}/history   every change, oldest first
//	GET|PUT|DELETE /{plural}/{name}, GET /{plural}/{name}/history   cluster-wide kinds (MeshConfig)
//	POST   /apply                                     atomic bulk apply
//
// If-Match: a header "If-Match: <generation>" (quotes allowed, 0 = must not exist)
// guards PUT, DELETE and an apply whose body holds exactly one object. A bulk apply
// guards objects one by one with a JSON envelope:
//
//	{"items": [<object>, ...], "ifMatch": {"Route/shop/cart": 3}}
//
// An apply body is multi-document YAML, a JSON list of objects, one JSON object, or
// the envelope above. A moved generation answers 412 and writes nothing.
//
// Every answer carries the store revision in the X-Weft-Revision header and, for
// JSON bodies, in a "revision" field. Bad input answers 400 with all errors in
// {"errors": [...]}. Cross-object problems that resource.ValidateSet reports as
// errors block the write (400); its warnings are returned in "warnings" and as
// Warning headers (code 299).
//
// GET answers JSON unless the request asks for YAML (Accept: application/yaml or
// ?output=yaml), in which case the body is resource.Encode's YAML.
package api

import (
	"context"
	"crypto/subtle"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"net"
	"net/http"
	"net/netip"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/weft-mesh/weft/pilot/store"
)

// Prefix is the path prefix of every resource endpoint.
const Prefix = "/apis/mesh.weft.dev/v1alpha1"

// RevisionHeader carries the store revision on every answer.
const RevisionHeader = "X-Weft-Revision"

// DefaultMaxBodyBytes bounds a request body; larger bodies answer 413.
const DefaultMaxBodyBytes = 8 << 20

// DefaultMaxApplyObjects bounds the objects in one bulk apply.
const DefaultMaxApplyObjects = 10000

// Config configures the admin API. Store and Logger are required.
type Config struct {
	Store  store.Store
	Logger hclog.Logger
	// AllowRemote accepts requests from non-loopback addresses. It requires Token,
	// which is then checked on every request, loopback or not.
	AllowRemote bool
	// Token is the bearer token (required when AllowRemote; optional otherwise,
	// and when set it is required on every request).
	Token []byte
	// MaxBodyBytes bounds request bodies; 0 means DefaultMaxBodyBytes.
	MaxBodyBytes int64
	// MaxApplyObjects bounds the objects in one apply; 0 means DefaultMaxApplyObjects.
	MaxApplyObjects int
	// Registry receives the API's metrics and is served on /metrics; nil means a
	// new private registry. Never the global one, so tests and processes do not share.
	Registry *prometheus.Registry
	// Health is shown by /healthz after "ok", one "key: value" line each in
	// key order, or as fields of the JSON object when the client accepts
	// application/json (pilot shows insecure modes here).
	Health map[string]string
	// PlaintextRegistration: pilot runs with --insecure-plaintext-registration.
	// Sidecars registered that way have no certificate, so no mTLS mode applies
	// to them: applying a PeerAuthentication, or a MeshConfig setting
	// defaultMtls, then warns that it is not enforced for them.
	PlaintextRegistration bool
}

// API is the admin HTTP handler.
type API struct {
	store   store.Store
	log     hclog.Logger
	token   []byte
	remote  bool
	maxBody int64
	// maxObjects bounds one apply.
	maxObjects int
	health     map[string]string // extra /healthz lines; immutable
	plaintext  bool              // Config.PlaintextRegistration
	metrics    *metrics
	mux        *http.ServeMux

	// writeMu serialises writes so the cross-object check (ValidateSet over the
	// current objects) and the Apply see the same store state within this process.
	writeMu sync.Mutex
}

// New checks cfg and builds the API.
func New(cfg Config) (*API, error) {
	if cfg.Store == nil {
		return nil, errors.New("api: Config.Store is required")
	}
	if cfg.Logger == nil {
		return nil, errors.New("api: Config.Logger is required")
	}
	if cfg.AllowRemote && len(cfg.Token) == 0 {
		return nil, errors.New("api: Config.AllowRemote requires a Token")
	}
	if cfg.MaxBodyBytes < 0 {
		return nil, fmt.Errorf("api: Config.MaxBodyBytes %d is negative", cfg.MaxBodyBytes)
	}
	if cfg.MaxBodyBytes == 0 {
		cfg.MaxBodyBytes = DefaultMaxBodyBytes
	}
	if cfg.MaxApplyObjects < 0 {
		return nil, fmt.Errorf("api: Config.MaxApplyObjects %d is negative", cfg.MaxApplyObjects)
	}
	if cfg.MaxApplyObjects == 0 {
		cfg.MaxApplyObjects = DefaultMaxApplyObjects
	}
	reg := cfg.Registry
	if reg == nil {
		reg = prometheus.NewRegistry()
	}
	a := &API{
		store:      cfg.Store,
		log:        cfg.Logger,
		token:      append([]byte(nil), cfg.Token...),
		remote:     cfg.AllowRemote,
		maxBody:    cfg.MaxBodyBytes,
		maxObjects: cfg.MaxApplyObjects,
		health:     maps.Clone(cfg.Health),
		plaintext:  cfg.PlaintextRegistration,
		mux:        http.NewServeMux(),
	}
	m, err := newMetrics(reg, cfg.Store)
	if err != nil {
		return nil, fmt.Errorf("api: registering metrics: %w", err)
	}
	a.metrics = m
	a.routes(promhttp.HandlerFor(reg, promhttp.HandlerOpts{}))
	return a, nil
}

func (a *API) routes(metricsHandler http.Handler) {
	m := a.mux
	m.HandleFunc("GET /healthz", a.healthz)
	m.Handle("GET /metrics", metricsHandler)
	m.HandleFunc("POST "+Prefix+"/apply", a.apply)
	m.HandleFunc("GET "+Prefix+"/{plural}", a.list)
	m.HandleFunc("GET "+Prefix+"/namespaces/{ns}/{plural}", a.list)
	m.HandleFunc("GET "+Prefix+"/{plural}/{name}", a.get)
	m.HandleFunc("PUT "+Prefix+"/{plural}/{name}", a.put)
	m.HandleFunc("DELETE "+Prefix+"/{plural}/{name}", a.delete)
	// "{plural}/{name}/{sub}" rather than ".../history": a literal last segment
	// would overlap "namespaces/{ns}/{plural}" with neither more specific.
	m.HandleFunc("GET "+Prefix+"/{plural}/{name}/{sub}", a.history)
	m.HandleFunc("GET "+Prefix+"/namespaces/{ns}/{plural}/{name}", a.get)
	m.HandleFunc("PUT "+Prefix+"/namespaces/{ns}/{plural}/{name}", a.put)
	m.HandleFunc("DELETE "+Prefix+"/namespaces/{ns}/{plural}/{name}", a.delete)
	m.HandleFunc("GET "+Prefix+"/namespaces/{ns}/{plural}/{name}/history", a.history)
}

// Handle serves h on pattern (http.ServeMux syntax) behind the same
// authorisation, body limit and request metrics as the resource endpoints.
// pilot/server mounts the xDS status API this way. Call it before serving.
func (a *API) Handle(pattern string, h http.Handler) { a.mux.Handle(pattern, h) }

// ServeHTTP authorises the request, bounds its body and dispatches it.
func (a *API) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	rec := &statusRecorder{ResponseWriter: w, code: http.StatusOK}
	defer func() { a.metrics.requests.WithLabelValues(r.Method, strconv.Itoa(rec.code)).Inc() }()
	if code, msg := a.authorize(r); code != 0 {
		a.log.Warn("refused admin request", "remote", r.RemoteAddr, "path", r.URL.Path, "code", code)
		rec.Header().Set("Content-Type", "application/json")
		rec.WriteHeader(code)
		_ = writeJSONBody(rec, errorBody{Errors: []string{msg}})
		return
	}
	if r.Body != nil {
		r.Body = http.MaxBytesReader(rec, r.Body, a.maxBody)
	}
	// A first value for answers no handler sets (405, /metrics); handlers replace
	// it with the revision their answer was read or written at.
	if rev, err := a.store.Revision(r.Context()); err == nil {
		rec.Header().Set(RevisionHeader, strconv.FormatInt(int64(rev), 10))
	}
	a.mux.ServeHTTP(rec, r)
}

// authorize returns 0 when the request may proceed, else the status and why.
func (a *API) authorize(r *http.Request) (int, string) {
	if !a.remote && !isLoopback(r.RemoteAddr) {
		return http.StatusForbidden, "admin API accepts only loopback clients (start pilot with --admin-allow-remote and --admin-token-file to allow others)"
	}
	if len(a.token) == 0 {
		return 0, ""
	}
	got, ok := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer ")
	if !ok || subtle.ConstantTimeCompare([]byte(strings.TrimSpace(got)), a.token) != 1 {
		return http.StatusUnauthorized, "missing or wrong bearer token"
	}
	return 0, ""
}

func isLoopback(remoteAddr string) bool {
	host, _, err := net.SplitHostPort(remoteAddr)
	if err != nil {
		return false
	}
	ip, err := netip.ParseAddr(host)
	if err != nil {
		return false
	}
	return ip.Unmap().IsLoopback()
}

func (a *API) healthz(w http.ResponseWriter, r *http.Request) {
	ctx, cancel := context.WithTimeout(r.Context(), 2*time.Second)
	defer cancel()
	rev, err := a.store.Revision(ctx)
	if err != nil {
		a.fail(w, r, fmt.Errorf("reading store revision: %w", err))
		return
	}
	w.Header().Set(RevisionHeader, strconv.FormatInt(int64(rev), 10))
	if strings.Contains(r.Header.Get("Accept"), "application/json") {
		obj := map[string]string{"status": "ok", "revision": strconv.FormatInt(int64(rev), 10)}
		for k, v := range a.health {
			obj[k] = v
		}
		w.Header().Set("Content-Type", "application/json")
		_ = json.NewEncoder(w).Encode(obj)
		return
	}
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	var b strings.Builder
	b.WriteString("ok\n")
	for _, k := range slices.Sorted(maps.Keys(a.health)) {
		fmt.Fprintf(&b, "%s: %s\n", k, a.health[k])
	}
	_, _ = io.WriteString(w, b.String())
}

// statusRecorder remembers the status code for the requests metric.
type statusRecorder struct {
	http.ResponseWriter
	code        int
	wroteHeader bool
}

func (s *statusRecorder) WriteHeader(code int) {
	if !s.wroteHeader {
		s.code = code
		s.wroteHeader = true
	}
	s.ResponseWriter.WriteHeader(code)
}

func (s *statusRecorder) Write(b []byte) (int, error) {
	s.wroteHeader = true
	return s.ResponseWriter.Write(b)
}

// Unwrap lets http.ResponseController and MaxBytesReader reach the real writer.
func (s *statusRecorder) Unwrap() http.ResponseWriter { return s.ResponseWriter }
