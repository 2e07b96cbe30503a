// Package app runs a whole sidecar from validated Settings: the runtime (activation,
// last-known-good, staleness), the xDS client, the outbound and inbound listeners,
// the admin endpoints and the readiness probe, until its context ends.
//
// Start-up order: every address is bound first (a port in use fails the start
// before anything runs); the persisted last-known-good snapshot is verified;
// with --token-file the certificate client asks pilot for the workload
// certificate and the xDS stream (mTLS) waits for it; the xDS stream starts with
// the snapshot as its initial state; if the stream has not activated a
// configuration within Options.LKGWait, the verified snapshot is activated and
// the sidecar is ready without pilot (so the snapshot may activate while the
// certificate is still being obtained: routing serves, mTLS waits for it).
package app

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os"
	"runtime/debug"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"google.golang.org/grpc"

	"github.com/weft-mesh/weft/bootstrap/node"
	"github.com/weft-mesh/weft/bootstrap/probe"
	"github.com/weft-mesh/weft/bootstrap/render"
	"github.com/weft-mesh/weft/certs/manifest"
	"github.com/weft-mesh/weft/ebpf/mode"
	"github.com/weft-mesh/weft/ebpf/redirect"
	"github.com/weft-mesh/weft/internal/outlierreport"
	"github.com/weft-mesh/weft/sidecar/admin"
	"github.com/weft-mesh/weft/sidecar/authz"
	"github.com/weft-mesh/weft/sidecar/certclient"
	"github.com/weft-mesh/weft/sidecar/cluster"
	"github.com/weft-mesh/weft/sidecar/dataplane"
	"github.com/weft-mesh/weft/sidecar/ejectreport"
	"github.com/weft-mesh/weft/sidecar/httpproxy"
	"github.com/weft-mesh/weft/sidecar/listener"
	"github.com/weft-mesh/weft/sidecar/mtls"
	"github.com/weft-mesh/weft/sidecar/outlier"
	"github.com/weft-mesh/weft/sidecar/overload"
	"github.com/weft-mesh/weft/sidecar/runtime"
	"github.com/weft-mesh/weft/sidecar/runtime/staleness"
	"github.com/weft-mesh/weft/sidecar/svid"
	"github.com/weft-mesh/weft/sidecar/tcpproxy"
	"github.com/weft-mesh/weft/sidecar/xdsclient"
)

// Defaults of Options.
const (
	DefaultTickInterval = time.Second
	DefaultLKGWait      = 500 * time.Millisecond
	MaxLKGWait          = 10 * time.Second
	// DefaultMemoryRelease, MinMemoryRelease and MaxMemoryRelease bound
	// Options.MemoryRelease.
	DefaultMemoryRelease = 30 * time.Second
	MinMemoryRelease     = time.Second
	MaxMemoryRelease     = time.Hour
	// lkgPoll is how often start-up checks whether pilot turned out unreachable.
	lkgPoll = 20 * time.Millisecond
)

// Listener names in pilot's configuration.
const (
	OutboundListener = "outbound"
	InboundListener  = "inbound"
)

// Options tune Run; the zero value is the production setting.
type Options struct {
	// Logger is the root logger; required.
	Logger hclog.Logger
	// TickInterval is how often staleness is re-judged. Default 1s.
	TickInterval time.Duration
	// LKGWait is how long a verified last-known-good snapshot waits for pilot to
	// deliver a configuration before it is activated. Default 500ms.
	LKGWait time.Duration
	// Backoff bounds xDS reconnects; zero uses the client's defaults.
	Backoff xdsclient.Backoff
	// ConfirmAfter: see xdsclient.Config; zero uses the client's default.
	ConfirmAfter time.Duration
	// MemoryRelease is how often heap the sidecar no longer uses is returned to
	// the OS (debug.FreeOSMemory: a GC, then free pages released). Idle, a
	// sidecar still allocates (staleness ticks, metric scrapes) and the Go
	// runtime keeps freed pages up to its next heap goal, about twice the live
	// heap: measured (tools/bench/proxy/idlerss.sh STEADY=200), idle RSS crept
	// from 18.7 to 21.8 MiB in 3 minutes of 15s scrapes without it and peaked at
	// 19.8 MiB with a release every 30s. Under load the cost per interval is one
	// extra GC (among many) and re-faulting the pages released. Zero means
	// DefaultMemoryRelease; a negative value turns it off.
	//
	// Memory is also released soon after each activation (at most once per
	// MinMemoryRelease): an activation leaves the old configuration, the
	// decoded protos and the old compiled config as garbage, and the heap grew
	// to hold them. Measured with 1,000 Services x 10 rules
	// (tools/bench/proxy/activationrss.sh): RSS 54, 68, 81, 68 MiB after four
	// activations without it.
	MemoryRelease time.Duration
	// AppProbers are the application's probes served on the readiness address
	// (cmd/sidecar reads them from WEFT_KUBE_APP_PROBERS, set by injection).
	AppProbers probe.Probers

	// release replaces debug.FreeOSMemory in tests.
	release func()
	// cgroupMemory replaces reading the container's memory limit in tests.
	cgroupMemory func() int64
}

// CgroupMemoryFraction: when the container's memory limit (cgroup) is below
// --memory-limit, the ceiling becomes this fraction of it, so shedding and the Go
// soft limit act before the kernel's OOM killer does.
const CgroupMemoryFraction = 0.9

// cgroupMemoryFiles hold a container's memory limit: cgroup v2, then v1.
var cgroupMemoryFiles = [...]string{"/sys/fs/cgroup/memory.max", "/sys/fs/cgroup/memory/memory.limit_in_bytes"}

// readCgroupMemory returns the container's memory limit in bytes, 0 if none.
func readCgroupMemory() int64 {
	for _, f := range cgroupMemoryFiles {
		b, err := os.ReadFile(f)
		if err != nil {
			continue
		}
		n, err := strconv.ParseInt(strings.TrimSpace(string(b)), 10, 64)
		if err != nil || n <= 0 || n >= 1<<62 { // "max", or v1's "unlimited" (a huge number)
			return 0
		}
		return n
	}
	return 0
}

// memoryCeiling is the flag's ceiling, lowered to CgroupMemoryFraction of the
// container's limit when that is smaller (never below overload.MinMemoryLimit).
func memoryCeiling(flag, cgroup int64) int64 {
	if cgroup <= 0 {
		return flag
	}
	return max(min(flag, int64(float64(cgroup)*CgroupMemoryFraction)), overload.MinMemoryLimit)
}

// Run runs the sidecar until ctx ends and everything has stopped. It returns an
// error if the sidecar could not start or a server failed.
func Run(ctx context.Context, s *render.Settings, o Options) error {
	if o.Logger == nil {
		return errors.New("sidecar: Options.Logger required")
	}
	if o.TickInterval <= 0 {
		o.TickInterval = DefaultTickInterval
	}
	if o.LKGWait <= 0 {
		o.LKGWait = DefaultLKGWait
	}
	if o.LKGWait > MaxLKGWait {
		return fmt.Errorf("sidecar: LKGWait %s exceeds %s", o.LKGWait, MaxLKGWait)
	}
	if o.MemoryRelease == 0 {
		o.MemoryRelease = DefaultMemoryRelease
	}
	if o.MemoryRelease > 0 && (o.MemoryRelease < MinMemoryRelease || o.MemoryRelease > MaxMemoryRelease) {
		return fmt.Errorf("sidecar: MemoryRelease %s outside [%s, %s]", o.MemoryRelease, MinMemoryRelease, MaxMemoryRelease)
	}
	if o.release == nil {
		o.release = debug.FreeOSMemory
	}
	log := o.Logger
	// --staleness overrides, per class, the StalenessPolicy pilot delivers, which
	// overrides the defaults (runtime.PolicyOverride).
	overrides, err := runtime.ParseOverrides(s.Staleness)
	if err != nil {
		return fmt.Errorf("sidecar: %w", err)
	}
	rcfg := runtime.Config{NodeID: s.Node.ID, StateDir: s.StateDir, Overrides: overrides, Logger: log.Named("runtime"),
		InsecureSkipManifest: s.InsecureSkipManifest, AppAddress: s.AppAddress}
	// Routes that set no timeout get --default-route-timeout (0s: none).
	// One registry for the sidecar's life: breaker counts and per-host state carry
	// over every configuration swap (the runtime calls Config.Activate).
	registry := cluster.NewRegistry()
	// Likewise authorization's Override sightings and counters (authz.go).
	authzState := authz.NewState()
	copts := dataplane.Options{DefaultRouteTimeout: s.Limits.DefaultRouteTimeout, Registry: registry,
		QueueTimeout: s.Limits.PendingTimeout, Authz: authzState}
	if copts.DefaultRouteTimeout == 0 {
		copts.DefaultRouteTimeout = -1
	}
	// The workload certificate (empty without --token-file); mTLS reads it on
	// every handshake. Every activation hands mTLS the configuration's trust.
	holder := &svid.Holder{}
	var mt *mtls.Manager
	if s.Identity() {
		var err error
		if mt, err = mtls.New(mtls.Config{SVID: holder, Logger: log.Named("mtls"), CRLGrace: s.Limits.CRLGrace}); err != nil {
			return fmt.Errorf("sidecar: %w", err)
		}
		copts.MTLS = mt
	}
	rcfg.Compile = func(st map[string]map[string]any) (*dataplane.Config, error) { return dataplane.CompileWith(st, copts) }
	if s.PublisherKey != "" {
		pub, err := manifest.LoadPublicKey(s.PublisherKey)
		if err != nil {
			return fmt.Errorf("sidecar: publisher key: %w", err)
		}
		rcfg.PublisherKey = pub
	}
	// --ca-root also decides whom manifests are trusted from: publishers the
	// mesh CA certifies (the runtime follows the bundles pilot delivers since).
	if s.CARoot != "" {
		roots, err := certclient.LoadRootFile(s.CARoot)
		if err != nil {
			return fmt.Errorf("sidecar: identity: %w", err)
		}
		if rcfg.TrustRoots, err = roots.Load(); err != nil {
			return fmt.Errorf("sidecar: identity: %w", err)
		}
		rcfg.TrustDomain = s.TrustDomain
	}
	if s.InsecureSkipManifest {
		log.Warn("manifests are not checked (--insecure-skip-manifest): any complete xDS state is activated and nothing is persisted")
	}
	if err := os.MkdirAll(s.StateDir, 0o700); err != nil {
		return fmt.Errorf("sidecar: state dir: %w", err)
	}
	if err := restoreSightings(s.StateDir, authzState, time.Now()); err != nil {
		return fmt.Errorf("sidecar: %w", err)
	}
	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	if rcfg.Metrics, err = runtime.NewMetrics(reg); err != nil {
		return fmt.Errorf("sidecar: %w", err)
	}
	rt, err := runtime.New(rcfg)
	if err != nil {
		return fmt.Errorf("sidecar: %w", err)
	}

	// Bind everything before starting anything. Intercepting, the outbound
	// and inbound listeners are tcp4/tcp6 sockets with MPTCP off, with their
	// IPv6 twins when the pod has IPv6 (listenIntercept).
	icept := intercepting(s)
	addrs := []struct {
		name string
		addr netip.AddrPort
	}{
		{"outbound", s.OutboundAddr}, {"inbound", s.InboundAddr},
		{"admin", s.AdminAddr}, {"ready", s.ReadyAddr},
	}
	lns := make(map[string][]net.Listener, len(addrs))
	defer func() {
		// The servers close their listeners when they stop; this covers a failed
		// start (closing twice is harmless).
		for _, l := range lns {
			for _, ln := range l {
				ln.Close()
			}
		}
	}()
	for _, a := range addrs {
		if icept && (a.name == "outbound" || a.name == "inbound") {
			l, err := listenIntercept(ctx, a.name, a.addr, log)
			if err != nil {
				return fmt.Errorf("sidecar: %s listener: %w", a.name, err)
			}
			lns[a.name] = l
			continue
		}
		ln, err := net.Listen("tcp", a.addr.String())
		if err != nil {
			return fmt.Errorf("sidecar: %s listener: %w", a.name, err)
		}
		lns[a.name] = []net.Listener{ln}
	}
	dnsp, err := newDNS(s, rt, log.Named("dns"))
	if err != nil {
		return fmt.Errorf("sidecar: %w", err)
	}
	defer dnsp.close() // Serve closes them too; this covers a failed start
	var dnsLns []net.Listener
	if dnsp != nil {
		reg.MustRegister(dnsp.srv)
		dnsLns = dnsp.lns
	}
	// Never pass a connection through to one of these (the loop guard).
	passthrough := cluster.NewPassthrough(cluster.NewSelf(ownAddrs(lns, dnsLns...)))
	dial := upstreamDial(icept, log)

	// Interception (ebpf/mode): chosen once the listeners are bound (a
	// connection redirected from the first moment waits in their accept
	// queue) and before the xDS client registers the node, whose
	// Interception says the chosen mode. ebpf that cannot be had fails the start.
	icfg, err := interceptConfig(s, log.Named("interception"))
	if err != nil {
		return fmt.Errorf("sidecar: %w", err)
	}
	intercept, err := mode.Choose(ctx, icfg)
	if err != nil {
		return fmt.Errorf("sidecar: %w", err)
	}
	defer intercept.Close() // detaches the eBPF programs (dying does too)
	reg.MustRegister(intercept.Collector())
	nodeInfo := s.Node
	nodeInfo.Interception = intercept.Node()
	// Incremental endpoints (pilot wraps them in SotW to name them).
	nodeInfo.LEDS = true

	// activated tells the memory goroutine a configuration was swapped in (one
	// pending signal is enough; the stream never waits on it).
	activated := make(chan struct{}, 1)
	initial, _ := rt.LoadLastKnownGood() // a refusal is logged and shown by the runtime
	ident, err := newIdentity(s, holder, log, reg, deliveredBundle(mt))
	if err != nil {
		return fmt.Errorf("sidecar: identity: %w", err)
	}
	xcfg := xdsclient.Config{Node: &nodeInfo, Servers: s.Pilot, Types: rt.Types(), Decode: rt.Decode, Apply: applied(rt, activated),
		Logger: log, Backoff: o.Backoff, ConfirmAfter: o.ConfirmAfter, Initial: initial, InitialConfirmed: rt.LastKnownGoodConfirmed()}
	if ident != nil {
		xcfg.TLS, xcfg.Redial = ident.xdsTLS, holder.Changed
	}
	if s.XDSMode == "sotw" {
		xcfg.Mode = xdsclient.SotW
	}
	client, err := xdsclient.New(xcfg)
	if err != nil {
		return fmt.Errorf("sidecar: %w", err)
	}
	pool, err := cluster.NewPool(cluster.PoolConfig{MaxIdlePerHost: 256, IdleTimeout: cluster.DefaultIdleTimeout, BufferSize: 16 << 10, MTLS: mt, Dial: dial})
	if err != nil {
		return fmt.Errorf("sidecar: %w", err)
	}
	defer pool.Close()
	plog := log.Named("proxy")
	reqs, err := admin.NewRequestMetrics(admin.RequestMetricsConfig{})
	if err != nil {
		return fmt.Errorf("sidecar: %w", err)
	}
	reg.MustRegister(reqs)
	lim := s.Limits
	if o.cgroupMemory == nil {
		o.cgroupMemory = readCgroupMemory
	}
	if c := memoryCeiling(lim.MemoryLimit, o.cgroupMemory()); c != lim.MemoryLimit {
		log.Warn("memory ceiling lowered below the container's memory limit", "memory-limit", lim.MemoryLimit, "ceiling", c)
		lim.MemoryLimit = c
	}
	// The memory ceiling is the Go runtime's soft limit (the GC works harder as
	// it nears it) and the base of shedding, which refuses new requests before
	// the soft limit is reached, so the kernel's limit is never the one that acts.
	defer debug.SetMemoryLimit(debug.SetMemoryLimit(lim.MemoryLimit)) // restored for the next Run (tests)
	mem, err := overload.NewMemory(overload.MemoryConfig{Limit: lim.MemoryLimit, HighWater: lim.MemoryHighWater})
	if err != nil {
		return fmt.Errorf("sidecar: %w", err)
	}
	conns, err := overload.NewLimit(listener.RefusedSidecar, lim.MaxConnections)
	if err != nil {
		return fmt.Errorf("sidecar: max-connections: %w", err)
	}
	hp, err := httpproxy.New(httpproxy.Config{Logger: plog, Pool: pool, Degraded: rt.Degraded, AuthzExpired: rt.AuthzExpired, Observer: reqs,
		BufferSize: lim.BufferSize, MaxHeaderBytes: lim.MaxHeaderBytes, MaxHeaderFields: lim.MaxHeaderFields,
		IdleTimeout: lim.IdleTimeout, ReadHeaderTimeout: lim.ReadHeaderTimeout, MaxConcurrentStreams: lim.MaxConcurrentStreams,
		H2StreamBuffer: lim.H2StreamBuffer, H2ConnBuffer: lim.H2ConnBuffer, H2MaxFrameSize: lim.H2MaxFrameSize, Memory: mem,
		MaxRetryBodyBytes: lim.MaxRetryBody, MTLS: mt, Dial: dial, Passthrough: passthrough, H2Server: s.H2Server, H2Client: s.H2Client})
	if err != nil {
		return fmt.Errorf("sidecar: %w", err)
	}
	defer hp.Close()
	tp, err := tcpproxy.New(tcpproxy.Config{Logger: plog, Observer: reqs, MTLS: mt, AuthzExpired: rt.AuthzExpired, Dial: dial, Passthrough: passthrough})
	if err != nil {
		return fmt.Errorf("sidecar: %w", err)
	}
	servers := map[string]*listener.Server{}
	for _, name := range []string{OutboundListener, InboundListener} {
		srv, err := listener.New(listener.Config{Name: name, Logger: log.Named(name), Snapshot: rt, HTTP: hp, TCP: tp,
			MaxConnections: lim.MaxConnectionsPerListener, Connections: conns, MaxRequests: lim.MaxRequestsPerListener,
			DrainTimeout: lim.DrainTimeout, MTLS: mt, Destination: destination(icept)})
		if err != nil {
			return fmt.Errorf("sidecar: %s listener: %w", name, err)
		}
		servers[name] = srv
	}
	oc, err := admin.NewOverloadCollector(admin.OverloadConfig{
		Listeners: []*listener.Server{servers[OutboundListener], servers[InboundListener]}, Connections: conns, Memory: mem,
		Limits: limitGauges(lim)})
	if err != nil {
		return fmt.Errorf("sidecar: %w", err)
	}
	reg.MustRegister(oc)
	rc, err := admin.NewRetryCollector(hp.RetryStats())
	if err != nil {
		return fmt.Errorf("sidecar: %w", err)
	}
	reg.MustRegister(rc)
	bc, err := admin.NewBreakerCollector(registry)
	if err != nil {
		return fmt.Errorf("sidecar: %w", err)
	}
	reg.MustRegister(bc)
	odc, err := admin.NewOutlierCollector(registry, func() []*cluster.Cluster {
		if cfg := rt.Load(); cfg != nil {
			return cfg.Clusters()
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("sidecar: %w", err)
	}
	reg.MustRegister(odc)
	reg.MustRegister(admin.NewXDSCollector(client.Status))
	rlc, err := admin.NewRateLimitCollector(registry)
	if err != nil {
		return fmt.Errorf("sidecar: %w", err)
	}
	reg.MustRegister(rlc)
	azc, err := admin.NewAuthzCollector(authzState, nil)
	if err != nil {
		return fmt.Errorf("sidecar: %w", err)
	}
	reg.MustRegister(azc)
	ptc, err := admin.NewPassthroughCollector(passthrough)
	if err != nil {
		return fmt.Errorf("sidecar: %w", err)
	}
	reg.MustRegister(ptc)
	reports, err := newReporter(s.Node.ID, log, client, mem, reg, registry.Ejections)
	if err != nil {
		return fmt.Errorf("sidecar: %w", err)
	}
	if mt != nil {
		mc, err := admin.NewMTLSCollector(mt, nil)
		if err != nil {
			return fmt.Errorf("sidecar: %w", err)
		}
		reg.MustRegister(mc)
	}
	adm, err := admin.New(admin.Config{Logger: log.Named("admin"), Runtime: rt, XDS: client.Status, Gatherer: reg, Requests: reqs, Pprof: s.Pprof,
		Outliers: registry, MTLS: mt, DNS: dnsp.status(), AppProbers: o.AppProbers, AppAddress: s.AppAddress,
		Interception: &admin.Interception{Mode: intercept.Mode, Reason: intercept.Reason}})
	if err != nil {
		return fmt.Errorf("sidecar: %w", err)
	}

	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var wg sync.WaitGroup
	errc := make(chan error, 8)
	run := func(name string, f func() error) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := f(); err != nil && ctx.Err() == nil {
				errc <- fmt.Errorf("sidecar: %s: %w", name, err)
				cancel()
			}
		}()
	}
	outboundLn, inboundLn := listener.Merge(lns["outbound"]...), listener.Merge(lns["inbound"]...)
	run("outbound", func() error { return servers[OutboundListener].Serve(ctx, outboundLn) })
	run("inbound", func() error { return servers[InboundListener].Serve(ctx, inboundLn) })
	run("admin", func() error { return admin.Serve(ctx, lns["admin"][0], adm.Handler(), log.Named("admin")) })
	run("ready", func() error { return admin.Serve(ctx, lns["ready"][0], adm.ReadyHandler(), log.Named("ready")) })
	if dnsp != nil {
		run("dns", func() error { return dnsp.serve(ctx) })
	}
	run("memory-guard", func() error { mem.Run(ctx); return nil })
	run("pool-reaper", func() error { reapPool(ctx, pool, rt, cluster.ReapInterval); return nil })
	if o.MemoryRelease > 0 {
		run("memory", func() error { releaseMemory(ctx, o.MemoryRelease, o.release, activated); return nil })
	}
	run("outlier-report", func() error { reports.Run(ctx); return nil })
	run("outlier", func() error { runOutliers(ctx, registry, log.Named("outlier")); return nil })
	run("authz-sightings", func() error { persistSightings(ctx, s.StateDir, authzState, log.Named("authz")); return nil })
	if ident != nil {
		run("certclient", func() error { _ = ident.client.Run(ctx); return nil })
	}
	run("xds", func() error {
		if ident != nil && waitCertificate(ctx, holder) != nil {
			return nil // stopped before a certificate came
		}
		if err := client.Run(ctx); !errors.Is(err, context.Canceled) {
			return err
		}
		return nil
	})
	run("staleness", func() error {
		// The verified snapshot is activated when pilot has had LKGWait to deliver,
		// or as soon as a connection attempt has failed (pilot unreachable).
		lkgTimer := time.NewTimer(o.LKGWait)
		defer lkgTimer.Stop()
		poll := time.NewTicker(lkgPoll)
		defer poll.Stop()
		pollC := poll.C
		useLKG := func(why string) {
			pollC = nil
			lkgTimer.Stop()
			if rt.ActivateLastKnownGood() {
				log.Info("serving the signed last-known-good snapshot until pilot answers", "because", why)
			}
		}
		tick := time.NewTimer(o.TickInterval)
		defer tick.Stop()
		for {
			select {
			case <-ctx.Done():
				return nil
			case <-lkgTimer.C:
				useLKG(fmt.Sprintf("no configuration from pilot within %s", o.LKGWait))
			case <-pollC:
				if st := client.Status(); st.Server != "" && !st.Connected {
					useLKG("pilot unreachable")
				} else if rt.Load() != nil {
					pollC = nil // pilot delivered
				}
			case now := <-tick.C:
				if mt != nil {
					mt.Sweep(now) // past a NotAfter, mTLS connections stop
				}
				tick.Reset(nextTick(now, rt.Tick(now, client.LastConfirmed(now)), o.TickInterval))
			}
		}
	})
	log.Info("sidecar started", "outbound", listenAddrs(lns["outbound"]), "inbound", listenAddrs(lns["inbound"]), "intercept", intercept.Mode,
		"admin", s.AdminAddr, "ready", s.ReadyAddr, "pilot", s.Pilot, "xds", s.XDSMode, "identity", identityLog(s))
	<-ctx.Done()
	wg.Wait()
	// The last-known-good is written off the runtime's lock; the final one must
	// reach the disk before the process exits.
	rt.Flush()
	close(errc)
	var errs []error
	for err := range errc {
		errs = append(errs, err)
	}
	log.Info("sidecar stopped")
	return errors.Join(errs...)
}

// interceptConfig is ebpf/mode's view of the settings: the outbound port the
// programs redirect to, the DNS proxy's port when it runs (port 53 goes to
// 127.0.0.1 or [::1] there), the sidecar's own uid (its connections are left
// alone), and the pod's own addresses (connections to them are not
// redirected).
func interceptConfig(s *render.Settings, log hclog.Logger) (mode.Config, error) {
	c := mode.Config{Requested: s.Intercept, Cgroup: s.InterceptCgroup, Logger: log,
		Redirect: redirect.Config{OutboundPort: s.OutboundAddr.Port(), ProxyUID: uint32(os.Getuid())}}
	if s.Intercept == render.InterceptEBPF || s.Intercept == render.InterceptAuto {
		own, err := podAddrs()
		if err != nil {
			return c, fmt.Errorf("--intercept=%s: the pod's own addresses: %w", s.Intercept, err)
		}
		c.Redirect.OwnAddrs = own
	}
	if dnsAddr, on := s.DNS.Listen(s.Node.Interception != node.InterceptionNone); on {
		if (s.Intercept == render.InterceptEBPF || s.Intercept == render.InterceptAuto) && dnsAddr.Addr() != netip.AddrFrom4([4]byte{127, 0, 0, 1}) {
			return c, fmt.Errorf("dns-addr: %s: with --intercept=%s port 53 is redirected to 127.0.0.1:<port>", dnsAddr, s.Intercept)
		}
		c.Redirect.DNS, c.Redirect.DNSPort = true, dnsAddr.Port()
	}
	return c, nil
}

// listenAddrs are the addresses lns are bound to, for the start-up log.
func listenAddrs(lns []net.Listener) []string {
	out := make([]string, len(lns))
	for i, ln := range lns {
		out[i] = ln.Addr().String()
	}
	return out
}

// newReporter reports the sidecar's outlier ejections to pilot on the ADS
// stream's connection (sidecar/ejectreport), reading them from ejections on its
// own goroutine; nothing on the request path calls it. Reports stop while memory
// is shed.
func newReporter(node string, log hclog.Logger, client *xdsclient.Client, mem *overload.Memory, reg prometheus.Registerer,
	ejections func() []outlier.Ejection) (*ejectreport.Reporter, error) {
	return ejectreport.New(ejectreport.Config{Node: node, Logger: log.Named("outlier-report"), Registerer: reg, Shedding: mem.Shedding,
		Source: func(now time.Time) []outlierreport.Entry { return ejectreport.Entries(now, ejections()) },
		Conn: func() grpc.ClientConnInterface {
			if cc := client.Conn(); cc != nil {
				return cc
			}
			return nil // not a typed nil
		}})
}

// reapPool closes idle upstream connections past their idle timeout, or to
// endpoints the active config no longer has, every interval until ctx ends.
func reapPool(ctx context.Context, pool *cluster.Pool, cfg interface{ Load() *dataplane.Config }, every time.Duration) {
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case now := <-t.C:
			pool.Reap(now, liveEndpoints(cfg.Load()))
		}
	}
}

// liveEndpoints is the address set of cfg's endpoints; empty without a config.
func liveEndpoints(cfg *dataplane.Config) map[string]struct{} {
	live := map[string]struct{}{}
	if cfg != nil {
		cfg.AddEndpointAddrs(live)
	}
	return live
}

// applied wraps rt.Apply: when a new configuration was swapped in, it signals
// activated without blocking.
func applied(rt *runtime.Runtime, activated chan<- struct{}) xdsclient.ApplyFunc {
	return func(ctx context.Context, u *xdsclient.Update) error {
		before := rt.Load()
		err := rt.Apply(ctx, u)
		if rt.Load() != before {
			select {
			case activated <- struct{}{}:
			default:
			}
		}
		return err
	}
}

// releaseMemory calls release every interval, and after each signal on
// activated, but never twice within MinMemoryRelease (signals in between are
// coalesced into one release when that time has passed), until ctx ends.
func releaseMemory(ctx context.Context, every time.Duration, release func(), activated <-chan struct{}) {
	t := time.NewTicker(every)
	defer t.Stop()
	soon := time.NewTimer(0)
	if !soon.Stop() {
		<-soon.C
	}
	var last time.Time
	waiting := false
	do := func() { release(); last = time.Now() }
	for {
		select {
		case <-ctx.Done():
			soon.Stop()
			return
		case <-t.C:
			do()
		case <-activated:
			if waiting {
				continue
			}
			if d := MinMemoryRelease - time.Since(last); d > 0 {
				soon.Reset(d)
				waiting = true
				continue
			}
			do()
		case <-soon.C:
			waiting = false
			do()
		}
	}
}

// nextTick is the delay to the next staleness evaluation: the tick interval, or
// sooner when some class changes level before that (so expiry is on time, not up
// to one interval late). Never less than a millisecond.
func nextTick(now time.Time, states []staleness.State, interval time.Duration) time.Duration {
	d := interval
	for _, s := range states {
		if !s.Next.IsZero() && s.Next.After(now) && s.Next.Sub(now) < d {
			d = s.Next.Sub(now)
		}
	}
	return max(d, time.Millisecond)
}

// limitGauges are the fixed bounds /metrics shows as weft_sidecar_limit.
func limitGauges(l render.Limits) map[string]float64 {
	return map[string]float64{
		"buffer_size_bytes":             float64(l.BufferSize),
		"max_header_bytes":              float64(l.MaxHeaderBytes),
		"max_header_fields":             float64(l.MaxHeaderFields),
		"h2_max_concurrent_streams":     float64(l.MaxConcurrentStreams),
		"h2_stream_buffer_bytes":        float64(l.H2StreamBuffer),
		"h2_conn_buffer_bytes":          float64(l.H2ConnBuffer),
		"h2_max_frame_size_bytes":       float64(l.H2MaxFrameSize),
		"read_header_timeout_seconds":   l.ReadHeaderTimeout.Seconds(),
		"idle_timeout_seconds":          l.IdleTimeout.Seconds(),
		"default_route_timeout_seconds": l.DefaultRouteTimeout.Seconds(),
		"drain_timeout_seconds":         l.DrainTimeout.Seconds(),
		"memory_high_water_fraction":    l.MemoryHighWater,
		"max_retry_body_bytes":          float64(l.MaxRetryBody),
		"pending_timeout_seconds":       l.PendingTimeout.Seconds(),
		"crl_grace_seconds":             l.CRLGrace.Seconds(),
	}
}
