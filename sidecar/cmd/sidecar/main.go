// Command sidecar is Weft's data-plane proxy: flags (or --bootstrap FILE) are parsed
// by bootstrap/render and the sidecar runs until SIGTERM or SIGINT.
package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/signal"
	"runtime"
	"syscall"

	"github.com/hashicorp/go-hclog"

	"github.com/weft-mesh/weft/bootstrap/intercept"
	"github.com/weft-mesh/weft/bootstrap/probe"
	"github.com/weft-mesh/weft/bootstrap/render"
	"github.com/weft-mesh/weft/internal/version"
	"github.com/weft-mesh/weft/sidecar/app"
)

const usage = `usage: sidecar --node-id ID --namespace NS --service-account SA --labels k=v,k=v
               --address IP --pilot HOST:PORT[,HOST:PORT] --publisher-key FILE --state-dir DIR
               [--admin-addr IP:PORT] [--outbound-addr IP:PORT] [--inbound-addr IP:PORT]
               [--ready-addr IP:PORT] [--app-address IP] [--locality R/Z/S] [--xds-mode delta|sotw]
               [--staleness CLASS=WARN/EXPIRE[/ONEXPIRE]]... [--insecure-skip-manifest] [--concurrency N]
               [--pprof (built with -tags weftpprof)] [--h2-server weft|std] [--h2-client weft|std]
               [--token-file FILE] [--ca-root FILE] [--trust-domain TD] [--certificate-in-memory-only]
               [--intercept none|iptables|ebpf|auto] [--intercept-cgroup DIR]
       sidecar --bootstrap FILE [flags overriding the file]
       sidecar --version | --help
       sidecar intercept [flags] (the pod's interception rules; sidecar intercept --help)
Defaults: admin 127.0.0.1:15000, outbound 127.0.0.1:15001, inbound <address>:15006,
ready <address>:15021, app address 127.0.0.1, xds-mode delta, concurrency 1 (GOMAXPROCS
in the environment overrides it), trust-domain cluster.local. WEFT_LOG_LEVEL sets
the log level (trace, debug, info, warn, error). WEFT_KUBE_APP_PROBERS (set by
injection) is the application's HTTP probes served under /app-health/ on the
ready address.
Identity: --token-file FILE (bootstrap token, at most 4096 bytes) gets a workload
certificate spiffe://TD/ns/NS/sa/SA from pilot (key made in the process, never
sent nowhere; renewed at 50-60% of its lifetime) and dials pilot over mTLS: --pilot is
then pilot's TLS address (:15012) and --ca-root FILE (pilot's <data-dir>/ca/root.pem)
verifies it as spiffe://TD/weft/pilot. Without --token-file: plaintext xDS, no mTLS.
--ca-root also trusts manifests from publishers the mesh CA certifies (then
--publisher-key, a pin, is optional). The certificate and key are also kept in
--state-dir (mode 0600), so a restart with pilot away keeps mTLS until NotAfter;
--certificate-in-memory-only keeps the key in memory only, as Istio and Linkerd do.
Interception (--intercept, default none: applications address the sidecar): iptables
(the init step's 'sidecar intercept' rules redirect); ebpf (cgroup eBPF outbound and
DNS redirect attached to --intercept-cgroup, default the sidecar's own cgroup, after a
self-test; the sidecar runs as uid 1337 with CAP_BPF, CAP_NET_ADMIN, CAP_PERFMON, and
does not start without it); auto (ebpf when its self-test passes, else iptables). The
choice and why: one log line, weft_interception_mode{mode}, config_dump "interception".
Overload bounds (each also a bootstrap file key; over a bound: connection closed, or
503 with x-weft-overflow; a route timeout answers 504 with x-weft-timeout):
  --max-connections N (10000, all listeners)   --max-connections-per-listener N (10000)
  --max-requests-per-listener N (10000)        --max-concurrent-streams N (250, per h2 conn)
  --buffer-size SIZE (16KiB)  --max-header-bytes SIZE (64KiB)  --max-header-fields N (128)
  --h2-stream-buffer SIZE (1MiB)  --h2-conn-buffer SIZE (1MiB)  --h2-max-frame-size SIZE (16KiB)
  --read-header-timeout D (30s)  --idle-timeout D (5m)  --default-route-timeout D (15s; 0s: none)
  --drain-timeout D (5s: on shutdown, HTTP/2 streams finish after GOAWAY)
  --pending-timeout D (1s: a request queued for an upstream connection, then 503 maxConnections)
  --memory-limit SIZE (256MiB: Go soft limit)  --memory-high-water F (0.9: shed new requests)
DNS proxy (UDP and TCP: the mesh's names from the active configuration, the rest
forwarded to resolv.conf's nameservers; on at 127.0.0.1:15053 when intercepting,
off in explicit mode unless set):
  --dns-addr IP:PORT|off  --dns-resolv-conf FILE (/etc/resolv.conf)  --dns-max-in-flight N (1024)
  --dns-forward-timeout D (2s)  --dns-max-tcp-connections N (256)`

func main() {
	// `sidecar intercept [flags]` installs the pod's interception rules (istio-init's
	// part), so a pod image needs this one binary.
	if len(os.Args) > 1 && os.Args[1] == "intercept" {
		os.Exit(intercept.Main(os.Args[2:], os.Stdout, os.Stderr))
	}
	// --version and --help answer before the settings are checked (which would
	// ask for --node-id and the rest).
	switch infoFlag(os.Args[1:]) {
	case "version":
		fmt.Println(version.String("sidecar"))
		return
	case "help":
		fmt.Println(usage)
		return
	}
	s, err := render.Parse(os.Args[1:], os.ReadFile)
	if err != nil {
		fmt.Fprintln(os.Stderr, "sidecar:", err)
		if errors.Is(err, render.ErrUsage) {
			fmt.Fprintln(os.Stderr, usage)
			os.Exit(2)
		}
		os.Exit(1)
	}
	// The application's HTTP probes moved behind the sidecar by injection
	// (bootstrap/inject); a bad value is a start-up error, as a bad flag is.
	probers, err := probe.Parse(os.Getenv(probe.EnvName))
	if err != nil {
		fmt.Fprintln(os.Stderr, "sidecar:", err)
		os.Exit(2)
	}
	// The sidecar's worker threads (render.DefaultConcurrency explains the
	// default); an operator's GOMAXPROCS wins.
	if os.Getenv("GOMAXPROCS") == "" {
		runtime.GOMAXPROCS(s.Concurrency)
	}
	level := hclog.LevelFromString(os.Getenv("WEFT_LOG_LEVEL"))
	if level == hclog.NoLevel {
		level = hclog.Info
	}
	log := hclog.New(&hclog.LoggerOptions{Name: "sidecar", Level: level, Output: os.Stderr})
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, os.Interrupt)
	defer stop()
	if err := app.Run(ctx, s, app.Options{Logger: log.With("node", s.Node.ID), AppProbers: probers}); err != nil {
		log.Error("exit", "error", err)
		os.Exit(1)
	}
}

// infoFlag reports whether args ask for the version or the usage ("version",
// "help") rather than a run (""). Flags stop at "--" as in package flag.
func infoFlag(args []string) string {
	for _, a := range args {
		switch a {
		case "--":
			return ""
		case "-version", "--version":
			return "version"
		case "-h", "-help", "--help":
			return "help"
		}
	}
	return ""
}
