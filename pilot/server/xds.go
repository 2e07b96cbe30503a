package server

import (
	"context"
	"crypto/ed25519"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"net"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/keepalive"

	"github.com/weft-mesh/weft/certs/manifest"
	"github.com/weft-mesh/weft/certs/revoke"
	"github.com/weft-mesh/weft/pilot/status"
	"github.com/weft-mesh/weft/pilot/store"
	"github.com/weft-mesh/weft/pilot/store/etcdstore"
	"github.com/weft-mesh/weft/pilot/xds/ads"
	"github.com/weft-mesh/weft/pilot/xds/adscodec"
	"github.com/weft-mesh/weft/pilot/xds/gen"
	"github.com/weft-mesh/weft/pilot/xds/meshcache"
	"github.com/weft-mesh/weft/pilot/xds/outlierrpc"
	"github.com/weft-mesh/weft/pilot/xds/publish"
	"github.com/weft-mesh/weft/pilot/xds/regshare"
	"github.com/weft-mesh/weft/pilot/xds/sign"
)

// XDSEnv is what Run hands the xDS server: the store, the bound listeners (the
// server owns them), the metrics registry served on /metrics, the status tracker
// whose API is mounted on the admin server, and pilot's data directory (for the
// publisher key).
type XDSEnv struct {
	Store    store.Store
	Listener net.Listener // plaintext
	// TLSListener and Authority are both set or both nil (a test's plaintext
	// hook): xDS and the CSR service over TLS with Authority's serving
	// certificate, trust bundle and CRL.
	TLSListener           net.Listener
	Authority             Authority
	TrustDomain           string
	PlaintextRegistration bool // Config.InsecurePlaintextRegistration
	Registry              *prometheus.Registry
	Status                *status.Tracker
	DataDir               string
	Logger                hclog.Logger
	// RollbackEpoch is signed into every manifest (pilot/store/highwater):
	// sidecars refuse a lower revision than they run unless it comes with a
	// higher epoch.
	RollbackEpoch uint64
}

// XDSLimits are every limit of the built-in xDS stack. DefaultXDSLimits holds the
// production values; every field must be positive.
type XDSLimits struct {
	// meshcache
	Debounce   time.Duration // quiet period after a store change before compiling
	MaxDelay   time.Duration // a burst of changes is compiled at most this late
	GenWorkers int           // concurrent snapshot generations per compile
	// RegistrationDebounce and RegistrationMaxDelay are Debounce and MaxDelay
	// for registrations (sidecars joining or leaving) without a store change:
	// each compile pushes the grown assignments to every proxy, so a fleet
	// joining is one push per window (meshcache.Config). Keep the max delay
	// below CurrentWait.
	RegistrationDebounce time.Duration
	RegistrationMaxDelay time.Duration
	// CurrentWait bounds how long a new stream waits for a snapshot compiled
	// from at least the store revision when it opened (meshcache.CurrentWait);
	// then it gets the older one pilot has, marked not current. At most
	// meshcache.MaxCurrentWait.
	CurrentWait time.Duration

	// ads
	MaxUnacked       int           // responses unanswered on one stream before it is cut
	SendTimeout      time.Duration // one Send; a proxy that does not read is cut
	RecvQueue        int           // requests waiting for a stream's owner
	MaxSubscriptions int           // explicit names per stream, over all types
	// MaxReadOnlySubscriptions is MaxSubscriptions for a stream that may not
	// register (no certificate, no plaintext registration).
	MaxReadOnlySubscriptions int
	DiffCacheEntries         int // shared snapshot-diff cache
	// MaxResourceNameBytes bounds each subscribed name.
	MaxResourceNameBytes int
	// MaxStreamsPerIdentity bounds the open ADS streams of one SPIFFE ID from
	// one address, or of one address without a certificate.
	MaxStreamsPerIdentity int
	// MaxReadOnlyStreams bounds the open ADS streams that may not register,
	// over all clients.
	MaxReadOnlyStreams int

	// gRPC
	MaxRecvMsgBytes      int    // one request from a proxy
	MaxConcurrentStreams uint32 // per connection
	// Per-connection transport buffers and receive windows. A connection
	// costs pilot its read buffer while open and its write buffer only while
	// writing (grpc-go shares write buffers by default: taken from a pool per flush), so 10,000
	// sidecars, each on its own connection, cost 10,000 read buffers.
	// Windows bound what a proxy may send before pilot reads it (gRPC's
	// dynamic window growth, up to 16 MiB, is off once they are set); what
	// pilot sends is bounded per stream by gRPC's write quota (64 KiB queued
	// before Send blocks) and one Send in flight, cut after SendTimeout, and
	// by MaxUnacked; the big pieces are referenced, not copied
	// (pilot/xds/adscodec).
	GRPCReadBufferBytes  int
	GRPCWriteBufferBytes int
	GRPCStreamWindow     int32 // per stream, at least MinGRPCWindow
	GRPCConnWindow       int32 // per connection, at least MinGRPCWindow

	// ManifestValidity is how long a signed manifest is valid; pilot re-signs at
	// half of it.
	ManifestValidity time.Duration

	// RegistrationTTL is the lease of this replica's registrations on a shared
	// store (--store etcd): a killed replica's sidecars leave the other
	// replicas' endpoints at most this long (plus etcd's lease slack) after its
	// last keep-alive. Between MinRegistrationTTL and MaxRegistrationTTL.
	RegistrationTTL time.Duration

	// MaxConcurrentReports bounds the outlier reports handled at once; one more
	// is refused at once (reports are dropped first under load).
	MaxConcurrentReports int
}

// DefaultXDSLimits are the limits pilot runs with.
func DefaultXDSLimits() XDSLimits {
	return XDSLimits{
		Debounce: 100 * time.Millisecond, MaxDelay: time.Second, GenWorkers: 4, CurrentWait: meshcache.DefaultCurrentWait,
		RegistrationDebounce: 250 * time.Millisecond, RegistrationMaxDelay: 3 * time.Second,
		MaxUnacked: 64, SendTimeout: 30 * time.Second, RecvQueue: 16, MaxSubscriptions: ads.DefaultMaxSubscriptions, MaxReadOnlySubscriptions: ads.DefaultMaxReadOnlySubscriptions, DiffCacheEntries: 4096,
		MaxResourceNameBytes: ads.DefaultMaxResourceNameBytes, MaxStreamsPerIdentity: ads.DefaultMaxStreamsPerIdentity, MaxReadOnlyStreams: ads.DefaultMaxReadOnlyStreams,
		MaxRecvMsgBytes: 4 << 20, MaxConcurrentStreams: 16,
		GRPCReadBufferBytes: 8 << 10, GRPCWriteBufferBytes: 32 << 10, GRPCStreamWindow: MinGRPCWindow, GRPCConnWindow: 1 << 20,
		ManifestValidity:     sign.DefaultValidity,
		MaxConcurrentReports: outlierrpc.DefaultMaxConcurrent,
		RegistrationTTL:      etcdstore.DefaultRegistrationTTL,
	}
}

// Bounds of XDSLimits.RegistrationTTL. etcd grants leases in whole seconds and
// may extend a short one to its minimum (1.5 election timeouts), so below 2 s
// the lease is not what was asked; above 5 min a killed replica's sidecars
// would linger as endpoints for minutes.
const (
	MinRegistrationTTL = 2 * time.Second
	MaxRegistrationTTL = 5 * time.Minute
)

// MinGRPCWindow is the smallest flow-control window gRPC accepts (it ignores a
// smaller one): 64 KiB, HTTP/2's initial window.
const MinGRPCWindow = 64 << 10

func (l XDSLimits) check() error {
	var errs []error
	for _, d := range []struct {
		name string
		v    time.Duration
	}{{"Debounce", l.Debounce}, {"MaxDelay", l.MaxDelay}, {"RegistrationDebounce", l.RegistrationDebounce}, {"RegistrationMaxDelay", l.RegistrationMaxDelay}, {"CurrentWait", l.CurrentWait}, {"SendTimeout", l.SendTimeout}, {"ManifestValidity", l.ManifestValidity}} {
		if d.v <= 0 {
			errs = append(errs, fmt.Errorf("%s must be > 0, got %v", d.name, d.v))
		}
	}
	for _, n := range []struct {
		name string
		v    int
	}{{"GenWorkers", l.GenWorkers}, {"MaxUnacked", l.MaxUnacked}, {"RecvQueue", l.RecvQueue}, {"MaxSubscriptions", l.MaxSubscriptions},
		{"DiffCacheEntries", l.DiffCacheEntries}, {"MaxRecvMsgBytes", l.MaxRecvMsgBytes}, {"MaxConcurrentStreams", int(l.MaxConcurrentStreams)},
		{"MaxConcurrentReports", l.MaxConcurrentReports}, {"GRPCReadBufferBytes", l.GRPCReadBufferBytes}, {"GRPCWriteBufferBytes", l.GRPCWriteBufferBytes}, {"MaxResourceNameBytes", l.MaxResourceNameBytes}, {"MaxReadOnlySubscriptions", l.MaxReadOnlySubscriptions}, {"MaxStreamsPerIdentity", l.MaxStreamsPerIdentity}, {"MaxReadOnlyStreams", l.MaxReadOnlyStreams}} {
		if n.v <= 0 {
			errs = append(errs, fmt.Errorf("%s must be > 0, got %d", n.name, n.v))
		}
	}
	for _, w := range []struct {
		name string
		v    int32
	}{{"GRPCStreamWindow", l.GRPCStreamWindow}, {"GRPCConnWindow", l.GRPCConnWindow}} {
		if w.v < MinGRPCWindow {
			errs = append(errs, fmt.Errorf("%s must be >= %d (gRPC ignores a smaller window), got %d", w.name, MinGRPCWindow, w.v))
		}
	}
	if l.CurrentWait > meshcache.MaxCurrentWait {
		errs = append(errs, fmt.Errorf("CurrentWait %v exceeds %v", l.CurrentWait, meshcache.MaxCurrentWait))
	}
	if l.RegistrationTTL < MinRegistrationTTL || l.RegistrationTTL > MaxRegistrationTTL {
		errs = append(errs, fmt.Errorf("RegistrationTTL must be between %v and %v, got %v", MinRegistrationTTL, MaxRegistrationTTL, l.RegistrationTTL))
	}
	if l.ManifestValidity > sign.MaxValidity {
		errs = append(errs, fmt.Errorf("ManifestValidity %v exceeds %v", l.ManifestValidity, sign.MaxValidity))
	}
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("xDS limits: %w", err)
	}
	return nil
}

// registrationStore is a store several replicas share (etcdstore): the
// registrations of each replica's sidecars are shared through it, so every
// replica compiles the same endpoints.
type registrationStore interface {
	ShareRegistrations(ctx context.Context, replica string, ttl time.Duration, lim etcdstore.RegistrationLimits) (*etcdstore.Registrations, error)
}

// shareRegistrations shares registrations on a replicated store (nil on one
// that is not: boltstore keeps them in memory). The replica id is random per
// process: a restarted replica's old registrations go with its old lease.
func shareRegistrations(ctx context.Context, st store.Store, ttl time.Duration, log hclog.Logger) (meshcache.Shared, error) {
	rs, ok := st.(registrationStore)
	if !ok {
		return nil, nil
	}
	id := rand.Text()
	regs, err := rs.ShareRegistrations(ctx, id, ttl, etcdstore.RegistrationLimits{})
	if err != nil {
		return nil, fmt.Errorf("sharing registrations with the other replicas: %w", err)
	}
	log.Info("registrations shared with the other replicas", "replica", id, "lease_ttl", ttl)
	return regshare.New(regs, log.Named("regshare")), nil
}

// ServeADS returns the built-in xDS server: store watch → compile → gen (checked
// with the sidecar's own validation for Weft sidecars) → signed manifest per
// sidecar (pilot/xds/publish) → ADS (SotW and delta) on env.Listener and
// env.TLSListener, reporting into env.Status; beside ADS, the sidecars' outlier
// reports (pilot/xds/outlierrpc), and on TLS the CA's CSR service.
func ServeADS(lim XDSLimits) XDSFunc {
	return func(ctx context.Context, env XDSEnv) error {
		defer env.Listener.Close()
		if env.TLSListener != nil {
			defer env.TLSListener.Close()
		}
		if err := lim.check(); err != nil {
			return err
		}
		if (env.TLSListener == nil) != (env.Authority == nil) {
			return errors.New("xDS: TLSListener and Authority go together")
		}
		log := env.Logger
		pcfg := publish.Config{Logger: log.Named("source"), Validity: lim.ManifestValidity, RollbackEpoch: env.RollbackEpoch,
			ReportGenError: env.Status.GenError, ReportCurrency: env.Status.Currency}
		// With the mesh CA (pilot/ca.Service), manifests are signed by its
		// certified publisher (key in the data directory, chain renewed by the CA)
		// and sidecars get its trust bundle and CRL as the ROOTCA Secret; without
		// it, by the bare key (only sidecars pinning it accept them).
		if p, ok := env.Authority.(interface {
			Publisher() (ed25519.PrivateKey, []*x509.Certificate)
		}); ok {
			pcfg.Publisher = p.Publisher
			priv, chain := p.Publisher()
			log.Info("publisher certified by the mesh CA", "key_id", manifest.KeyID(priv.Public().(ed25519.PublicKey)),
				"serial", chain[0].SerialNumber.Text(16), "not_after", chain[0].NotAfter)
		} else {
			priv, err := manifest.LoadOrCreateKey(env.DataDir)
			if err != nil {
				return fmt.Errorf("publisher key in %s: %w", env.DataDir, err)
			}
			pcfg.Key = priv
			log.Info("publisher key loaded", "key_id", manifest.KeyID(priv.Public().(ed25519.PublicKey)))
		}
		if t, ok := env.Authority.(publish.TrustSource); ok {
			pcfg.Trust = t
		}
		src, err := publish.New(pcfg)
		if err != nil {
			return err
		}
		// Registrations are shared until ADS stops serving, not only until ctx ends.
		sctx, stopSharing := context.WithCancel(ctx)
		defer stopSharing()
		shared, err := shareRegistrations(sctx, env.Store, lim.RegistrationTTL, log)
		if err != nil {
			return err
		}
		cache, err := meshcache.New(meshcache.Config{
			Shared: shared,
			Store:  env.Store, Logger: log.Named("meshcache"),
			Debounce: lim.Debounce, MaxDelay: lim.MaxDelay, GenWorkers: lim.GenWorkers, CurrentWait: lim.CurrentWait,
			RegistrationDebounce: lim.RegistrationDebounce, RegistrationMaxDelay: lim.RegistrationMaxDelay,
			Generate: src.Generate(gen.Proxy),
			// What gen.Proxy reads of a node: sidecars of one workload class
			// share one generation per mesh, not one per address (10,000
			// sidecars of two classes cost two, not 10,000).
			ScopeKey:   gen.ScopeKey,
			OnCompiled: func(rev int64, at time.Time) { env.Status.RevisionWritten(rev, at) },
		})
		if err != nil {
			return err
		}
		src.Use(cache)
		td := env.TrustDomain
		if td == "" {
			td = DefaultTrustDomain
		}
		srv, err := ads.New(ads.Config{
			Logger: log.Named("ads"), Source: src, Status: env.Status,
			MaxUnacked: lim.MaxUnacked, SendTimeout: lim.SendTimeout, RecvQueue: lim.RecvQueue,
			MaxSubscriptions: lim.MaxSubscriptions, MaxReadOnlySubscriptions: lim.MaxReadOnlySubscriptions, DiffCacheEntries: lim.DiffCacheEntries,
			TrustDomain: td, PlaintextRegistration: env.PlaintextRegistration,
			MaxStreamsPerIdentity: lim.MaxStreamsPerIdentity, MaxReadOnlyStreams: lim.MaxReadOnlyStreams, MaxResourceNameBytes: lim.MaxResourceNameBytes,
			Revocations: revocations(env.Authority),
		})
		if err != nil {
			return err
		}
		// Outlier reports come on the sidecars' ADS connections (internal/outlierreport).
		reports, err := outlierrpc.New(outlierrpc.Config{Status: env.Status, TrustDomain: td, Logger: log.Named("outliers"), MaxConcurrent: lim.MaxConcurrentReports})
		if err != nil {
			return err
		}
		opts := []grpc.ServerOption{
			grpc.MaxRecvMsgSize(lim.MaxRecvMsgBytes),
			grpc.MaxConcurrentStreams(lim.MaxConcurrentStreams),
			// Every stream that sends a resource version shares its marshalled
			// bytes instead of encoding a copy of its own.
			adscodec.ServerOption(),
			grpc.ReadBufferSize(lim.GRPCReadBufferBytes),
			grpc.WriteBufferSize(lim.GRPCWriteBufferBytes),
			grpc.InitialWindowSize(lim.GRPCStreamWindow),
			grpc.InitialConnWindowSize(lim.GRPCConnWindow),
			// Proxies keep one long-lived stream; let them ping to keep NATs open.
			grpc.KeepaliveEnforcementPolicy(keepalive.EnforcementPolicy{MinTime: 10 * time.Second, PermitWithoutStream: true}),
		}
		// One ADS server on both: node-id claims and per-identity bounds hold
		// across the listeners.
		servers := []struct {
			gs  *grpc.Server
			lis net.Listener
		}{{grpc.NewServer(opts...), env.Listener}}
		if env.TLSListener != nil {
			tlsGS := grpc.NewServer(append(opts, grpc.Creds(credentials.NewTLS(serverTLS(env.Authority))))...)
			env.Authority.Register(tlsGS)
			servers = append(servers, struct {
				gs  *grpc.Server
				lis net.Listener
			}{tlsGS, env.TLSListener})
		}
		for _, s := range servers {
			srv.Register(s.gs)
			reports.Register(s.gs)
		}

		ctx, cancel := context.WithCancel(ctx)
		defer cancel()
		cacheErr := make(chan error, 1)
		go func() { cacheErr <- cache.Run(ctx) }()
		serveErr := make(chan error, len(servers))
		for _, s := range servers {
			go func() { serveErr <- s.gs.Serve(s.lis) }()
		}

		var runErr error
		select {
		case <-ctx.Done():
		case err := <-cacheErr:
			cacheErr <- err
			if err != nil {
				runErr = fmt.Errorf("mesh cache: %w", err)
			}
		case err := <-serveErr:
			serveErr <- err
			runErr = fmt.Errorf("gRPC serve: %w", err)
		}
		cancel()
		// ADS streams never end by themselves, so a graceful stop would wait for
		// every proxy to hang up: cut them (they reconnect to the next pilot).
		for _, s := range servers {
			s.gs.Stop()
		}
		for range servers {
			<-serveErr
		}
		if err := <-cacheErr; err != nil && runErr == nil {
			runErr = fmt.Errorf("mesh cache: %w", err)
		}
		return runErr
	}
}

// serverTLS is the TLS listener's configuration: TLS 1.3, pilot's serving
// certificate, and a client certificate verified against the current trust
// bundle and CRL when one is given (a client without one may read, never
// register). All are read per handshake, so a renewal, a root rotation or a
// revocation applies to the next connection.
func serverTLS(a Authority) *tls.Config {
	base := &tls.Config{MinVersion: tls.VersionTLS13, GetCertificate: a.ServingCert, ClientAuth: tls.VerifyClientCertIfGiven,
		NextProtos: []string{"h2"}, VerifyConnection: func(cs tls.ConnectionState) error { return checkRevoked(a.CRL(), cs) }}
	return &tls.Config{
		MinVersion:     tls.VersionTLS13,
		GetCertificate: a.ServingCert,
		GetConfigForClient: func(*tls.ClientHelloInfo) (*tls.Config, error) {
			c := base.Clone()
			c.ClientCAs = a.ClientCAs()
			return c, nil
		},
	}
}

// checkRevoked refuses a client certificate crl lists.
func checkRevoked(crl *revoke.CRL, cs tls.ConnectionState) error {
	if len(cs.PeerCertificates) == 0 || crl == nil {
		return nil
	}
	if leaf := cs.PeerCertificates[0]; crl.Revoked(leaf.SerialNumber) {
		return fmt.Errorf("client certificate serial %x (%v) is revoked (CRL %d)", leaf.SerialNumber, leaf.URIs, crl.Number())
	}
	return nil
}

// revocations is a's CRL feed for ads, nil when a has none.
func revocations(a Authority) ads.Revocations {
	if r, ok := a.(ads.Revocations); ok {
		return r
	}
	return nil
}
