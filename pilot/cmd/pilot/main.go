// Command pilot is Weft's control plane: flags, then one call to server.Run.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"syscall"

	"github.com/hashicorp/go-hclog"

	"github.com/weft-mesh/weft/bootstrap/inject"
	"github.com/weft-mesh/weft/bootstrap/node"
	"github.com/weft-mesh/weft/bootstrap/webhook"
	"github.com/weft-mesh/weft/internal/version"
	"github.com/weft-mesh/weft/pilot/ca"
	"github.com/weft-mesh/weft/pilot/server"
	"github.com/weft-mesh/weft/pilot/store/retention"
)

func main() {
	os.Exit(run())
}

func run() int {
	fs := flag.NewFlagSet("pilot", flag.ContinueOnError)
	var cfg server.Config
	fs.StringVar(&cfg.DataDir, "data-dir", "", "directory of the embedded store (required)")
	fs.StringVar(&cfg.AdminAddr, "admin-addr", server.DefaultAdminAddr, "admin HTTP API address")
	fs.StringVar(&cfg.XDSAddr, "xds-addr", server.DefaultXDSAddr,
		"plaintext xDS (ADS) gRPC address: clients may read, not register (unless --insecure-plaintext-registration); loopback by default")
	fs.StringVar(&cfg.XDSTLSAddr, "xds-tls-addr", server.DefaultXDSTLSAddr,
		"xDS and the CA's CSR service over TLS (TLS 1.3; client certificates verified against the mesh trust bundle and CRL; without one a client may read, not register)")
	fs.BoolVar(&cfg.InsecurePlaintextRegistration, "insecure-plaintext-registration", false,
		"INSECURE: let any client of --xds-addr register as any workload (namespace and labels from its own metadata); for local development and tests only")
	fs.BoolVar(&cfg.AcceptStoreRegression, "accept-store-regression", false,
		"start on a store behind the revision this pilot has served, or on another store (refused otherwise), and tell sidecars to accept the older revisions (bumps the rollback epoch); for a deliberate restore")
	fs.Int64Var(&cfg.History.KeepRevisions, "history-revisions", retention.DefaultKeepRevisions,
		fmt.Sprintf("store history kept: at least the last this many revisions (%d..%d)", retention.MinKeepRevisions, retention.MaxKeepRevisions))
	fs.DurationVar(&cfg.History.KeepFor, "history-retention", retention.DefaultKeepFor,
		fmt.Sprintf("store history kept: at least this much time of it (0..%s); older history beyond --history-revisions is compacted", retention.MaxKeepFor))
	fs.DurationVar(&cfg.History.Interval, "compact-interval", retention.DefaultInterval,
		fmt.Sprintf("how often the store's history is compacted (%s..%s)", retention.MinInterval, retention.MaxInterval))
	fs.StringVar(&cfg.TrustDomain, "trust-domain", server.DefaultTrustDomain, "the mesh's SPIFFE trust domain")
	var storeOpts storeFlags
	storeOpts.register(fs)
	var caOpts caFlags
	fs.StringVar(&caOpts.rootCert, "ca-root-cert", "", "plugged-in CA: the root certificate (PEM) sidecars trust; without it pilot generates its own root in <data-dir>/ca")
	fs.StringVar(&caOpts.rootKey, "ca-root-key", "", "plugged-in CA: the private key of the signer (the first certificate of --ca-chain, else the root)")
	fs.StringVar(&caOpts.chain, "ca-chain", "", "plugged-in CA: the intermediate(s) that sign, signer first, up to but not including the root (optional)")
	fs.StringVar(&caOpts.tokenKey, "ca-token-key", "",
		"existing ed25519 key file (PKCS#8 PEM) that signs and verifies bootstrap tokens, instead of <data-dir>/ca's: pilot replicas on one store share it")
	fs.StringVar(&caOpts.publisherKey, "publisher-key-file", "",
		"existing ed25519 key file (PKCS#8 PEM) pilot signs manifests with, instead of <data-dir>'s (its public key is still written to <data-dir>/publisher.pub): replicas share it")
	fs.Var(&caOpts.sans, "tls-san", "extra DNS name or IP SAN of pilot's TLS serving certificate (repeatable or comma-separated; at most 32 of each)")
	webhookAddr := fs.String("webhook-addr", server.DefaultWebhookAddr,
		"sidecar injection webhook (HTTPS, POST "+webhook.Path+", a serving certificate from the mesh CA); \"off\" disables it")
	fs.Var(&caOpts.webhookSANs, "webhook-san", "DNS name the API server calls the webhook by, added to pilot's serving certificate (repeatable or comma-separated; default "+server.DefaultWebhookDNS+")")
	fs.StringVar(&cfg.WebhookMesh.PilotAddress, "inject-pilot-addr", inject.DefaultPilotAddress, "injected sidecars' --pilot: pilot's TLS xDS address as pods reach it")
	fs.IntVar(&caOpts.maxIssued, "max-issued", ca.DefaultMaxIssued,
		"issued certificates pilot remembers (for cert list, revocation by SPIFFE ID and rotation); at the bound expired ones are dropped, oldest first, and when none is expired new certificates are refused")
	fs.BoolVar(&cfg.AdminAllowRemote, "admin-allow-remote", false, "accept admin requests from non-loopback clients (requires --admin-token-file)")
	fs.StringVar(&cfg.AdminAdvertiseURL, "admin-advertise-url", "",
		"--store etcd: the URL other pilot replicas reach this one's admin API at, for status across replicas (default http://<--admin-addr>)")
	fs.StringVar(&cfg.AdminTokenFile, "admin-token-file", "", "file holding the bearer token every admin request must carry")
	fs.BoolVar(&cfg.AdminPprof, "admin-pprof", false, "serve Go's runtime profiles (net/http/pprof) on the admin API under "+server.PprofPath)
	lim := server.DefaultXDSLimits()
	fs.DurationVar(&lim.Debounce, "xds-debounce", lim.Debounce, "quiet period after a store change before pushing")
	fs.DurationVar(&lim.MaxDelay, "xds-max-delay", lim.MaxDelay, "a burst of store changes is pushed at most this late")
	fs.DurationVar(&lim.RegistrationDebounce, "xds-registration-debounce", lim.RegistrationDebounce,
		"quiet period after a sidecar registers or leaves before pushing the changed endpoints")
	fs.DurationVar(&lim.RegistrationMaxDelay, "xds-registration-max-delay", lim.RegistrationMaxDelay,
		"a burst of registrations (a fleet joining) is pushed at most this late: one push to every proxy per window (keep below --xds-current-wait)")
	fs.IntVar(&lim.GenWorkers, "xds-gen-workers", lim.GenWorkers, "concurrent snapshot generations")
	fs.DurationVar(&lim.CurrentWait, "xds-current-wait", lim.CurrentWait,
		"a new stream waits at most this for a snapshot compiled from the store revision it opened at, then gets the older one, marked not current")
	fs.IntVar(&lim.MaxUnacked, "xds-max-unacked", lim.MaxUnacked, "responses a proxy may leave unanswered before its stream is cut")
	fs.DurationVar(&lim.SendTimeout, "xds-send-timeout", lim.SendTimeout, "a proxy that does not read a response within this is cut")
	fs.IntVar(&lim.MaxSubscriptions, "xds-max-subscriptions", lim.MaxSubscriptions,
		"resource names one ADS stream with a client certificate (or plaintext registration) may subscribe to, over all types (each costs pilot about twice its length)")
	fs.IntVar(&lim.MaxReadOnlySubscriptions, "xds-max-read-only-subscriptions", lim.MaxReadOnlySubscriptions,
		"--xds-max-subscriptions for a stream that may not register (no client certificate)")
	fs.IntVar(&lim.MaxResourceNameBytes, "xds-max-resource-name-bytes", lim.MaxResourceNameBytes, "bytes of one subscribed resource name")
	fs.IntVar(&lim.MaxStreamsPerIdentity, "xds-max-streams-per-identity", lim.MaxStreamsPerIdentity,
		"open ADS streams per SPIFFE ID and source address (without a certificate: per source address; IPv6 per /64); one more is refused")
	fs.IntVar(&lim.MaxReadOnlyStreams, "xds-max-read-only-streams", lim.MaxReadOnlyStreams,
		"open ADS streams without a client certificate (that may not register), over all clients; one more is refused (sidecars with certificates are not counted)")
	fs.IntVar(&lim.MaxRecvMsgBytes, "xds-max-recv-bytes", lim.MaxRecvMsgBytes, "bytes of one request from a proxy")
	var maxStreams uint
	fs.UintVar(&maxStreams, "xds-max-streams-per-connection", uint(lim.MaxConcurrentStreams), "concurrent gRPC streams on one connection")
	fs.IntVar(&lim.GRPCReadBufferBytes, "xds-grpc-read-buffer", lim.GRPCReadBufferBytes, "bytes of each xDS connection's read buffer")
	fs.IntVar(&lim.GRPCWriteBufferBytes, "xds-grpc-write-buffer", lim.GRPCWriteBufferBytes, "bytes of an xDS connection's write buffer (taken from a pool while writing)")
	streamWin, connWin := int(lim.GRPCStreamWindow), int(lim.GRPCConnWindow)
	fs.IntVar(&streamWin, "xds-grpc-stream-window", streamWin, "bytes a proxy may send on one stream before pilot reads them (at least 65536)")
	fs.IntVar(&connWin, "xds-grpc-conn-window", connWin, "bytes a proxy may send on one connection before pilot reads them (at least 65536)")
	fs.DurationVar(&lim.ManifestValidity, "manifest-validity", lim.ManifestValidity, "validity of each sidecar's signed manifest (re-signed at half)")
	fs.DurationVar(&lim.RegistrationTTL, "etcd-registration-ttl", lim.RegistrationTTL,
		fmt.Sprintf("--store etcd: lease of this replica's sidecar registrations; a killed replica's sidecars leave the others' endpoints this long after its last keep-alive (%v to %v)", server.MinRegistrationTTL, server.MaxRegistrationTTL))
	fs.IntVar(&lim.MaxConcurrentReports, "xds-max-concurrent-reports", lim.MaxConcurrentReports,
		"outlier reports handled at once; one more is refused at once (reports are dropped first under load)")
	cfg.Status = server.DefaultStatusLimits()
	fs.IntVar(&cfg.Status.MaxOutlierEntries, "outlier-max-entries", cfg.Status.MaxOutlierEntries,
		"ejection entries pilot holds from outlier reports over all proxies; a report past it is refused")
	fs.Usage = func() {
		fmt.Fprintf(fs.Output(), "Usage of pilot:\n")
		fs.PrintDefaults()
		fmt.Fprintf(fs.Output(), "\nFixed bounds on what an xDS client presents (refused past them): node id %d bytes, %d labels, label key %d bytes and value %d bytes,\n"+
			"other node fields %d bytes, node metadata %d bytes.\n", node.MaxIDBytes, node.MaxLabels, node.MaxLabelKeyBytes, node.MaxLabelValueBytes,
			node.MaxFieldBytes, node.MaxMetadataBytes)
	}
	level := fs.String("log-level", "info", "log level: trace, debug, info, warn, error")
	jsonLogs := fs.Bool("log-json", false, "log as JSON")
	showVersion := fs.Bool("version", false, "print the version and exit")
	if err := fs.Parse(os.Args[1:]); err != nil {
		if errors.Is(err, flag.ErrHelp) { // -h, --help: the usage was asked for
			return 0
		}
		return 2
	}
	if maxStreams > 1<<31 {
		fmt.Fprintf(os.Stderr, "pilot: --xds-max-streams-per-connection %d is too large\n", maxStreams)
		return 2
	}
	lim.MaxConcurrentStreams = uint32(maxStreams)
	for _, w := range []struct {
		flag string
		v    int
		dst  *int32
	}{{"--xds-grpc-stream-window", streamWin, &lim.GRPCStreamWindow}, {"--xds-grpc-conn-window", connWin, &lim.GRPCConnWindow}} {
		if w.v > 1<<30 {
			fmt.Fprintf(os.Stderr, "pilot: %s %d is too large (at most %d)\n", w.flag, w.v, 1<<30)
			return 2
		}
		*w.dst = int32(w.v) // below the minimum: refused with the other limits
	}
	if *webhookAddr != "off" {
		cfg.WebhookAddr = *webhookAddr
		if len(caOpts.webhookSANs.dns)+len(caOpts.webhookSANs.ips) == 0 {
			caOpts.webhookSANs.dns = []string{server.DefaultWebhookDNS}
		}
	} else {
		caOpts.webhookSANs = sanList{}
	}
	if *showVersion {
		fmt.Println(version.String("pilot"))
		return 0
	}
	if fs.NArg() > 0 {
		fmt.Fprintf(os.Stderr, "pilot: unexpected arguments %q\n", fs.Args())
		return 2
	}
	lvl := hclog.LevelFromString(*level)
	if lvl == hclog.NoLevel {
		fmt.Fprintf(os.Stderr, "pilot: --log-level %q is not one of trace, debug, info, warn, error\n", *level)
		return 2
	}
	cfg.Logger = hclog.New(&hclog.LoggerOptions{Name: "pilot", Level: lvl, JSONFormat: *jsonLogs, Output: os.Stderr})

	openStore, err := storeOpts.open(fs)
	if err != nil {
		fmt.Fprintf(os.Stderr, "pilot: %v\n", err)
		return 2
	}
	cfg.OpenStore = openStore
	cfg.XDS = server.ServeADS(lim)
	cfg.CA = caOpts.open

	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	if err := server.Run(ctx, cfg); err != nil {
		cfg.Logger.Error("pilot stopped", "error", err)
		return 1
	}
	return 0
}
