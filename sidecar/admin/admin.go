// Package admin serves a sidecar's local admin endpoints (127.0.0.1:15000 by
// default): /config_dump (JSON: effective revision, per-type xDS versions, nonces
// and errors, staleness per class, manifest, last-known-good), /stats (plain text
// counters), /metrics (Prometheus, the sidecar's own registry); and, on its own
// address (15021), the readiness probe /healthz/ready (503 with the reason until a
// valid configuration is active), the liveness probe /healthz/live and the
// application's probes the injector moved behind the sidecar (/app-health/...).
//
// Everything shown is read from immutable snapshots (runtime.Dump,
// xdsclient.Status), so a scrape never blocks the stream or the request path.
package admin

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/netip"
	"sort"
	"strings"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/weft-mesh/weft/bootstrap/probe"
	"github.com/weft-mesh/weft/sidecar/cluster"
	"github.com/weft-mesh/weft/sidecar/dns"
	"github.com/weft-mesh/weft/sidecar/mtls"
	"github.com/weft-mesh/weft/sidecar/runtime"
	"github.com/weft-mesh/weft/sidecar/xdsclient"
)

// Limits of the admin HTTP servers.
const (
	ReadHeaderTimeout = 5 * time.Second
	WriteTimeout      = 30 * time.Second
	MaxHeaderBytes    = 16 << 10
	ShutdownTimeout   = 5 * time.Second
)

// PprofTag is the build tag that links the profiler in (see Config.Pprof).
const PprofTag = "weftpprof"

// MaxProfileSeconds bounds /debug/pprof/profile?seconds=N (below WriteTimeout).
const MaxProfileSeconds = 25

// ErrConfig wraps every configuration error from New.
var ErrConfig = errors.New("admin: invalid config")

// Runtime is what admin reads from the sidecar runtime.
type Runtime interface {
	Dump() *runtime.Dump
	Ready() (bool, string)
}

// Config of the admin endpoints; checked by New.
type Config struct {
	Logger  hclog.Logger
	Runtime Runtime
	// XDS returns the xDS client's status; nil before the client exists.
	XDS func() *xdsclient.Status
	// Gatherer serves /metrics (the sidecar's own registry).
	Gatherer prometheus.Gatherer
	// Now is the clock for ages shown; default time.Now.
	Now func() time.Time
	// Requests, when set, adds per-cluster request and TCP counts to /stats
	// (register it with Gatherer's registry for /metrics).
	Requests *RequestMetrics
	// Pprof adds Go's profiler under /debug/pprof/ (bootstrap/render allows it on
	// a loopback admin address only). Only a sidecar built with -tags weftpprof
	// (PprofTag) has it: linking runtime/pprof costs the idle sidecar ~0.5 MiB of
	// resident code (idle RSS goal: 20 MiB), so `make build` leaves it out and New
	// refuses Pprof there.
	Pprof bool
	// Outliers, when set, serves /outliers: current ejections and recent outlier
	// events (JSON).
	Outliers *cluster.Registry
	// MTLS, when set, adds the certificate and CRL lines to /healthz/ready, which
	// is 503 while mTLS is needed and cannot be done (see mtls.Status).
	MTLS *mtls.Manager
	// Interception, when set, is config_dump's "interception": the mode chosen
	// at start (ebpf/mode) and why.
	Interception *Interception
	// DNS, when set, adds the DNS proxy's section to /config_dump (it has no
	// say in readiness).
	DNS func() *dns.Status
	// AppProbers are the application's HTTP probes the injector moved behind
	// the sidecar (WEFT_KUBE_APP_PROBERS): the readiness address serves each at
	// its /app-health/<container>/<kind> path, forwarded to AppAddress
	// (default 127.0.0.1).
	AppProbers probe.Probers
	AppAddress netip.Addr
}

// Interception is how the sidecar's traffic reaches it: mode none, iptables or
// ebpf, and the reason (for auto, why eBPF was or was not had).
type Interception struct {
	Mode   string `json:"mode"`
	Reason string `json:"reason"`
}

// Admin holds the handlers.
type Admin struct {
	cfg    Config
	prober *appProber // nil without AppProbers
}

// New checks cfg.
func New(cfg Config) (*Admin, error) {
	switch {
	case cfg.Logger == nil:
		return nil, fmt.Errorf("%w: Logger required", ErrConfig)
	case cfg.Runtime == nil:
		return nil, fmt.Errorf("%w: Runtime required", ErrConfig)
	case cfg.Gatherer == nil:
		return nil, fmt.Errorf("%w: Gatherer required", ErrConfig)
	case cfg.Pprof && !pprofBuilt:
		return nil, fmt.Errorf("%w: Pprof: this sidecar was built without the profiler (build with -tags %s)", ErrConfig, PprofTag)
	}
	if cfg.XDS == nil {
		cfg.XDS = func() *xdsclient.Status { return nil }
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	a := &Admin{cfg: cfg}
	if len(cfg.AppProbers) > 0 {
		if err := cfg.AppProbers.Validate(); err != nil {
			return nil, fmt.Errorf("%w: %v", ErrConfig, err)
		}
		a.prober = newAppProber(cfg.AppProbers, cfg.AppAddress)
	}
	return a, nil
}

// Handler serves /config_dump, /stats, /metrics and /outliers.
func (a *Admin) Handler() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /config_dump", a.configDump)
	mux.HandleFunc("GET /stats", a.stats)
	mux.HandleFunc("GET /outliers", a.outliers)
	mux.Handle("GET /metrics", promhttp.HandlerFor(a.cfg.Gatherer, promhttp.HandlerOpts{}))
	if a.cfg.Pprof {
		pprofRoutes(mux)
	}
	mux.HandleFunc("GET /{$}", func(w http.ResponseWriter, _ *http.Request) {
		fmt.Fprintln(w, "weft sidecar admin: /config_dump /stats /metrics /outliers")
	})
	return mux
}

// ReadyHandler serves /healthz/ready: 200 "ready" (plus the classes that are not
// fresh) or 503 with the reason; /healthz/live; and the application's probes
// under /app-health/ (Config.AppProbers).
func (a *Admin) ReadyHandler() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /healthz/live", liveHandler)
	if a.prober != nil {
		mux.Handle("GET "+probe.PathPrefix, a.prober)
	}
	mux.HandleFunc("GET /healthz/ready", func(w http.ResponseWriter, _ *http.Request) {
		ok, body := a.cfg.Runtime.Ready()
		if a.cfg.MTLS != nil {
			st := a.cfg.MTLS.Status(a.cfg.Now())
			if ok && !st.Ready {
				// The routing state is ready but mTLS is not: the first line
				// must not say "ready" on a 503 (the mtls lines say why).
				body = "not ready: mTLS" + strings.TrimPrefix(body, "ready")
			}
			ok = ok && st.Ready
			body += "\n" + st.Lines()
		}
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		w.Header().Set("Cache-Control", "no-store")
		if !ok {
			w.WriteHeader(http.StatusServiceUnavailable)
		}
		fmt.Fprintln(w, body)
	})
	return mux
}

// ConfigDump is the /config_dump document.
type ConfigDump struct {
	NodeID string `json:"nodeId"`
	// Revision is the store revision of the active configuration (its manifest).
	Revision      int64                 `json:"revision"`
	Ready         bool                  `json:"ready"`
	Reason        string                `json:"reason,omitempty"`
	Active        *runtime.ActiveInfo   `json:"active,omitempty"`
	Manifest      *runtime.ManifestInfo `json:"manifest,omitempty"`
	Pending       string                `json:"pending,omitempty"`
	LastConfirmed time.Time             `json:"lastConfirmed,omitzero"`
	Staleness     []runtime.ClassState  `json:"staleness"`
	LastKnownGood runtime.LKGInfo       `json:"lastKnownGood"`
	Counters      runtime.Counters      `json:"counters"`
	XDS           *XDS                  `json:"xds,omitempty"`
	Interception  *Interception         `json:"interception,omitempty"`
	DNS           *dns.Status           `json:"dns,omitempty"`
}

// XDS is the xDS client's part of /config_dump.
type XDS struct {
	Mode                 string      `json:"mode"`
	Server               string      `json:"server"`
	Connected            bool        `json:"connected"`
	StreamUpSince        time.Time   `json:"streamUpSince,omitzero"`
	UnknownTypeResponses uint64      `json:"unknownTypeResponses"`
	Types                []XDSTypeIn `json:"types"`
}

// XDSTypeIn is one subscribed type.
type XDSTypeIn struct {
	Type       string    `json:"type"`
	TypeURL    string    `json:"typeUrl"`
	Version    string    `json:"version"`
	Nonce      string    `json:"nonce"`
	LastError  string    `json:"lastError,omitempty"`
	ACKs       uint64    `json:"acks"`
	NACKs      uint64    `json:"nacks"`
	Ignored    uint64    `json:"ignored"`
	Resources  int       `json:"resources"`
	Subscribed []string  `json:"subscribed,omitempty"`
	LastUpdate time.Time `json:"lastUpdate,omitzero"`
}

// Snapshot assembles the /config_dump document.
func (a *Admin) Snapshot() *ConfigDump {
	d := a.cfg.Runtime.Dump()
	cd := &ConfigDump{NodeID: d.NodeID, Ready: d.Ready, Reason: d.Reason, Active: d.Active, Pending: d.Pending,
		LastConfirmed: d.LastConfirmed, Staleness: d.Staleness, LastKnownGood: d.LastKnownGood, Counters: d.Counters,
		Interception: a.cfg.Interception}
	if d.Active != nil {
		cd.Revision, cd.Manifest = d.Active.Revision, d.Active.Manifest
	}
	if s := a.cfg.XDS(); s != nil {
		x := &XDS{Mode: s.Mode.String(), Server: s.Server, Connected: s.Connected, StreamUpSince: s.StreamUpSince,
			UnknownTypeResponses: s.UnknownTypeResponses, Types: []XDSTypeIn{}}
		for _, t := range s.Types {
			x.Types = append(x.Types, XDSTypeIn{Type: xdsclient.ShortName(t.TypeURL), TypeURL: t.TypeURL, Version: t.Version, Nonce: t.Nonce,
				LastError: t.LastError, ACKs: t.ACKs, NACKs: t.NACKs, Ignored: t.Ignored, Resources: t.Resources,
				Subscribed: t.Subscribed, LastUpdate: t.LastUpdate})
		}
		cd.XDS = x
	}
	if a.cfg.DNS != nil {
		cd.DNS = a.cfg.DNS()
	}
	return cd
}

func (a *Admin) configDump(w http.ResponseWriter, _ *http.Request) {
	b, err := json.MarshalIndent(a.Snapshot(), "", "  ")
	if err != nil {
		a.cfg.Logger.Error("config_dump", "error", err)
		http.Error(w, "config_dump: "+err.Error(), http.StatusInternalServerError)
		return
	}
	w.Header().Set("Content-Type", "application/json")
	w.Write(append(b, '\n'))
}

// stats writes "name: value" lines, sorted, Envoy-style.
func (a *Admin) stats(w http.ResponseWriter, _ *http.Request) {
	cd := a.Snapshot()
	lines := map[string]string{
		"runtime.ready":              boolNum(cd.Ready),
		"runtime.revision":           fmt.Sprint(cd.Revision),
		"runtime.activations":        fmt.Sprint(cd.Counters.Activations),
		"runtime.activation_noops":   fmt.Sprint(cd.Counters.NoOps),
		"runtime.activation_refused": fmt.Sprint(cd.Counters.Rejected),
	}
	for _, s := range cd.Staleness {
		lines["staleness."+s.Class+".age_seconds"] = fmt.Sprintf("%.3f", s.AgeSeconds)
		lines["staleness."+s.Class+".level"] = s.Level
	}
	if x := cd.XDS; x != nil {
		lines["xds.connected"] = boolNum(x.Connected)
		lines["xds.unknown_type_responses"] = fmt.Sprint(x.UnknownTypeResponses)
		for _, t := range x.Types {
			p := "xds." + t.Type + "."
			lines[p+"acks"] = fmt.Sprint(t.ACKs)
			lines[p+"nacks"] = fmt.Sprint(t.NACKs)
			lines[p+"ignored"] = fmt.Sprint(t.Ignored)
			lines[p+"resources"] = fmt.Sprint(t.Resources)
			lines[p+"version"] = t.Version
		}
	}
	if a.cfg.Requests != nil {
		a.cfg.Requests.statsLines(lines)
	}
	keys := make([]string, 0, len(lines))
	for k := range lines {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	var b strings.Builder
	for _, k := range keys {
		b.WriteString(k + ": " + lines[k] + "\n")
	}
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	w.Write([]byte(b.String()))
}

func boolNum(b bool) string {
	if b {
		return "1"
	}
	return "0"
}

// Serve serves h on ln until ctx ends, then shuts down gracefully (bounded by
// ShutdownTimeout).
func Serve(ctx context.Context, ln net.Listener, h http.Handler, log hclog.Logger) error {
	srv := &http.Server{Handler: h, ReadHeaderTimeout: ReadHeaderTimeout, WriteTimeout: WriteTimeout, MaxHeaderBytes: MaxHeaderBytes,
		ErrorLog: log.StandardLogger(&hclog.StandardLoggerOptions{InferLevels: true})}
	errc := make(chan error, 1)
	go func() { errc <- srv.Serve(ln) }()
	select {
	case err := <-errc:
		return fmt.Errorf("admin serve %s: %w", ln.Addr(), err)
	case <-ctx.Done():
	}
	sctx, cancel := context.WithTimeout(context.Background(), ShutdownTimeout)
	defer cancel()
	err := srv.Shutdown(sctx)
	<-errc
	if err != nil {
		return fmt.Errorf("admin shutdown %s: %w", ln.Addr(), err)
	}
	return nil
}
