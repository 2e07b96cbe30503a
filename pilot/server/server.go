// Package server wires pilot together: the embedded store, the admin HTTP API
// (with the xDS status API mounted under /apis/status/v1/ and the CA's under
// /apis/ca/v1/), metrics and the xDS gRPC servers, and runs them until the
// context ends.
//
// xDS is served on two listeners by one ADS server: TLS on XDSTLSAddr (15012;
// pilot's serving certificate from the mesh CA, client certificates verified
// against the trust bundle when given; the CSR service rides on it), and
// plaintext on XDSAddr (15010, loopback by default), where a client may read but
// not register unless InsecurePlaintextRegistration.
package server

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"strings"
	"sync"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"google.golang.org/grpc"

	"github.com/weft-mesh/weft/bootstrap/inject"
	"github.com/weft-mesh/weft/bootstrap/webhook"
	"github.com/weft-mesh/weft/certs/revoke"
	"github.com/weft-mesh/weft/pilot/api"
	"github.com/weft-mesh/weft/pilot/status"
	"github.com/weft-mesh/weft/pilot/status/outlieragg"
	"github.com/weft-mesh/weft/pilot/store"
	"github.com/weft-mesh/weft/pilot/store/boltstore"
	"github.com/weft-mesh/weft/pilot/store/etcdstore"
	"github.com/weft-mesh/weft/pilot/store/highwater"
	"github.com/weft-mesh/weft/pilot/store/retention"
)

// DefaultAdminAddr, DefaultXDSAddr and DefaultXDSTLSAddr are Istio's port
// numbers (DESIGN.md, Ports). Plaintext xDS is loopback only unless opened.
const (
	DefaultAdminAddr  = "127.0.0.1:15014"
	DefaultXDSAddr    = "127.0.0.1:15010"
	DefaultXDSTLSAddr = ":15012"
)

// DefaultTrustDomain is the SPIFFE trust domain when none is given (Istio's).
const DefaultTrustDomain = "cluster.local"

// Authority is the mesh CA as pilot's servers use it (pilot/ca.Service).
type Authority interface {
	// ServingCert is pilot's own TLS certificate (tls.Config.GetCertificate).
	ServingCert(*tls.ClientHelloInfo) (*tls.Certificate, error)
	// ClientCAs is the current trust bundle that client certificates are
	// verified against (during a root rotation, old and new roots).
	ClientCAs() *x509.CertPool
	// CRL is the current revocation list; a client certificate it lists is
	// refused at pilot's TLS handshake.
	CRL() *revoke.CRL
	// Register registers the CSR service on the TLS gRPC server.
	Register(*grpc.Server)
	// Handler serves the CA's admin API, mounted at /apis/ca/v1/.
	Handler() http.Handler
}

// AuthorityFunc opens the CA once the store is open; Run calls it once.
type AuthorityFunc func(ctx context.Context, env AuthorityEnv) (Authority, error)

// AuthorityEnv is what the CA is opened with.
type AuthorityEnv struct {
	DataDir     string // the CA keeps its state in DataDir/ca
	TrustDomain string
	Store       store.Store // MeshConfig (certificateTTL, crlValidity) is read from it
	Registry    *prometheus.Registry
	Logger      hclog.Logger
}

// DefaultShutdownTimeout bounds graceful shutdown of in-flight admin requests.
const DefaultShutdownTimeout = 10 * time.Second

// XDSFunc serves xDS on env.Listener until ctx ends. It owns the listener
// (closes it on return) and returns nil when ctx ended normally. pilot's main
// sets Config.XDS to ServeADS; tests plug in fakes; when nil, pilot does not
// listen on XDSAddr.
type XDSFunc func(ctx context.Context, env XDSEnv) error

// Config configures Run. DataDir and Logger are required.
type Config struct {
	DataDir   string
	AdminAddr string // default DefaultAdminAddr; "127.0.0.1:0" picks a free port
	XDSAddr   string // plaintext xDS; default DefaultXDSAddr; used only when XDS is set
	// XDSTLSAddr is xDS (and the CSR service) over TLS; default
	// DefaultXDSTLSAddr; used only when XDS and CA are set.
	XDSTLSAddr string
	// TrustDomain is the mesh's SPIFFE trust domain; default DefaultTrustDomain.
	TrustDomain string
	// InsecurePlaintextRegistration lets clients on the plaintext listener
	// register as any workload their metadata names (the behaviour before
	// authenticated xDS): for local development and tests of other features
	// only. Logged at Warn at start and shown by /healthz.
	InsecurePlaintextRegistration bool
	// AcceptStoreRegression starts pilot on a store behind its record of the
	// revisions it served (pilot/store/highwater), or on another store, and
	// bumps the rollback epoch so sidecars accept the older revisions. Without
	// it such a store is refused at start.
	AcceptStoreRegression bool
	// History is what store history pilot keeps (pilot/store/retention);
	// zero fields take the defaults.
	History retention.Policy
	// CA opens the mesh CA; nil runs without one, and then without the TLS
	// listener (nothing can register unless InsecurePlaintextRegistration).
	CA AuthorityFunc

	// AdminAllowRemote lets non-loopback clients use the admin API; it requires
	// AdminTokenFile, whose bearer token is then required on every request.
	AdminAllowRemote bool
	AdminTokenFile   string
	// AdminPprof serves Go's runtime profiles on the admin API under
	// PprofPath (pilot --admin-pprof), behind the admin API's authorisation.
	AdminPprof bool

	Logger hclog.Logger
	XDS    XDSFunc

	// ShutdownTimeout bounds graceful shutdown; 0 means DefaultShutdownTimeout.
	ShutdownTimeout time.Duration
	// OnReady, when set, is called once every listener is bound, with the admin
	// address actually bound (useful with port 0 in tests).
	OnReady func(adminAddr net.Addr)
	// OnXDSReady, when set and XDS is set, is called with the bound plaintext
	// xDS address.
	OnXDSReady func(xdsAddr net.Addr)
	// OnXDSTLSReady, when set and the TLS listener runs, is called with its
	// bound address.
	OnXDSTLSReady func(xdsTLSAddr net.Addr)

	// Status bounds the xDS status tracker; zero means DefaultStatusLimits.
	Status StatusLimits

	// WebhookAddr serves the sidecar injection webhook (bootstrap/webhook) over
	// HTTPS with pilot's serving certificate from the mesh CA; it needs CA. ""
	// is off (pilot's --webhook-addr defaults to DefaultWebhookAddr).
	WebhookAddr string
	// WebhookMesh is what injected sidecars are told (pilot's address, the CA
	// root ConfigMap, the token Secret); empty fields take inject's defaults,
	// and the trust domain is TrustDomain.
	WebhookMesh inject.Mesh
	// OnWebhookReady, when set and the webhook runs, is called with its bound address.
	OnWebhookReady func(webhookAddr net.Addr)
	// AdminAdvertiseURL is how other pilot replicas on the same store reach
	// this one's admin API (status across replicas); default http://<bound
	// admin address>. Only stores with replicas (etcd) use it.
	AdminAdvertiseURL string

	// OpenStore opens the store (pilot --store etcd: etcdstore); nil opens the
	// embedded boltstore in DataDir.
	OpenStore func(ctx context.Context, log hclog.Logger) (store.Store, error)
}

// StatusLimits bound what the xDS status tracker remembers.
type StatusLimits struct {
	Retention       time.Duration // how long a DISCONNECTED proxy stays listed
	MaxDisconnected int           // DISCONNECTED proxies kept at most
	MaxRevisions    int           // store revisions whose write time is kept
	// MaxOutlierEntries bounds the ejection entries held from outlier reports
	// over all proxies; 0 means outlieragg.DefaultMaxEntries.
	MaxOutlierEntries int
}

// DefaultStatusLimits are the status tracker's production limits.
func DefaultStatusLimits() StatusLimits {
	return StatusLimits{Retention: 10 * time.Minute, MaxDisconnected: 10_000, MaxRevisions: 1024, MaxOutlierEntries: outlieragg.DefaultMaxEntries}
}

func (c *Config) check() error {
	var errs []error
	if c.DataDir == "" {
		errs = append(errs, errors.New("DataDir (--data-dir) is required"))
	}
	if c.Logger == nil {
		errs = append(errs, errors.New("a Logger is required"))
	}
	if c.WebhookAddr != "" && c.CA == nil {
		errs = append(errs, errors.New("the injection webhook (--webhook-addr) needs the mesh CA for its serving certificate"))
	}
	if c.AdminAllowRemote && c.AdminTokenFile == "" {
		errs = append(errs, errors.New("--admin-allow-remote requires --admin-token-file"))
	}
	if c.ShutdownTimeout < 0 {
		errs = append(errs, fmt.Errorf("ShutdownTimeout %v is negative", c.ShutdownTimeout))
	}
	if c.AdminAddr == "" {
		c.AdminAddr = DefaultAdminAddr
	}
	if c.XDSAddr == "" {
		c.XDSAddr = DefaultXDSAddr
	}
	if c.XDSTLSAddr == "" {
		c.XDSTLSAddr = DefaultXDSTLSAddr
	}
	if c.TrustDomain == "" {
		c.TrustDomain = DefaultTrustDomain
	}
	if c.ShutdownTimeout == 0 {
		c.ShutdownTimeout = DefaultShutdownTimeout
	}
	if c.Status == (StatusLimits{}) {
		c.Status = DefaultStatusLimits()
	}
	d := retention.DefaultPolicy()
	if c.History.KeepRevisions == 0 {
		c.History.KeepRevisions = d.KeepRevisions
	}
	if c.History.Interval == 0 {
		c.History.Interval = d.Interval
	}
	if err := c.History.Check(); err != nil {
		errs = append(errs, err)
	}
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("pilot config: %w", err)
	}
	return nil
}

// ReadToken reads a bearer token file: its content without surrounding white
// space, which must not be empty.
func ReadToken(path string) ([]byte, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("reading admin token file: %w", err)
	}
	tok := strings.TrimSpace(string(b))
	if tok == "" {
		return nil, fmt.Errorf("admin token file %s is empty", path)
	}
	return []byte(tok), nil
}

// closeAll closes the listeners that were opened (nil ones are skipped).
func closeAll(ls ...net.Listener) {
	for _, l := range ls {
		if l != nil {
			_ = l.Close()
		}
	}
}

// replicaStore is a store several pilot replicas share (etcdstore), where they
// find each other.
type replicaStore interface {
	Announce(ctx context.Context, r etcdstore.Replica, ttl time.Duration) error
	Replicas(ctx context.Context) ([]etcdstore.Replica, error)
}

// replicaStatus is the status API: on a store with replicas this replica
// announces itself and answers for all of them (status.FanOutHandler).
func replicaStatus(ctx context.Context, cfg Config, st store.Store, tracker *status.Tracker, admin net.Addr, token []byte) (http.Handler, error) {
	rs, ok := st.(replicaStore)
	if !ok {
		return tracker.Handler(), nil
	}
	self := cfg.AdminAdvertiseURL
	if self == "" {
		if tcp, ok := admin.(*net.TCPAddr); ok && tcp.IP.IsUnspecified() {
			return nil, fmt.Errorf("admin address %s is a wildcard: set the admin URL other replicas reach this one at (--admin-advertise-url)", admin)
		}
		self = "http://" + admin.String()
	}
	if err := rs.Announce(ctx, etcdstore.Replica{ID: self, AdminURL: self, Started: time.Now().UTC()}, etcdstore.DefaultReplicaTTL); err != nil {
		return nil, fmt.Errorf("announcing this replica: %w", err)
	}
	cfg.Logger.Info("replica announced; status API answers for every replica", "admin_url", self)
	return tracker.FanOutHandler(status.FanOut{Self: self, Token: string(token), Peers: func(ctx context.Context) ([]status.Peer, error) {
		list, err := rs.Replicas(ctx)
		peers := make([]status.Peer, len(list))
		for i, r := range list {
			peers[i] = status.Peer{ID: r.ID, AdminURL: r.AdminURL}
		}
		return peers, err
	}}), nil
}

// Run opens the store in cfg.DataDir, serves the admin API (and xDS when
// cfg.XDS is set) and blocks until ctx ends or a server fails; then it shuts
// everything down and closes the store.
func Run(ctx context.Context, cfg Config) (err error) {
	if err := cfg.check(); err != nil {
		return err
	}
	log := cfg.Logger
	var token []byte
	if cfg.AdminTokenFile != "" {
		if token, err = ReadToken(cfg.AdminTokenFile); err != nil {
			return err
		}
	}

	if err := os.MkdirAll(cfg.DataDir, 0o700); err != nil {
		return fmt.Errorf("creating data dir: %w", err)
	}
	var st store.Store
	if cfg.OpenStore != nil {
		st, err = cfg.OpenStore(ctx, log.Named("store"))
	} else if st, err = boltstore.Open(cfg.DataDir); err != nil {
		err = fmt.Errorf("opening store in %s: %w", cfg.DataDir, err)
	}
	if err != nil {
		return err
	}
	defer func() {
		if cerr := st.Close(); cerr != nil && err == nil {
			err = fmt.Errorf("closing store: %w", cerr)
		}
	}()
	rev, err := st.Revision(ctx)
	if err != nil {
		return fmt.Errorf("reading store revision: %w", err)
	}
	log.Info("store opened", "data_dir", cfg.DataDir, "revision", rev)
	served, err := checkServed(cfg, st, rev)
	if err != nil {
		return err
	}

	reg := prometheus.NewRegistry()
	if err := reg.Register(collectors.NewGoCollector()); err != nil {
		return fmt.Errorf("registering go metrics: %w", err)
	}
	outliers := outlieragg.DefaultLimits()
	if cfg.Status.MaxOutlierEntries != 0 {
		outliers.MaxEntries = cfg.Status.MaxOutlierEntries
	}
	tracker, err := status.New(status.Config{
		Logger: log.Named("status"), Registerer: reg, Retention: cfg.Status.Retention,
		MaxDisconnected: cfg.Status.MaxDisconnected, MaxRevisions: cfg.Status.MaxRevisions, Outliers: outliers,
	})
	if err != nil {
		return fmt.Errorf("xDS status: %w", err)
	}
	var authority Authority
	if cfg.CA != nil {
		if authority, err = cfg.CA(ctx, AuthorityEnv{DataDir: cfg.DataDir, TrustDomain: cfg.TrustDomain, Store: st, Registry: reg, Logger: log.Named("ca")}); err != nil {
			return fmt.Errorf("mesh CA: %w", err)
		}
	}
	registration := "off (plaintext xDS clients may read, not register)"
	if cfg.InsecurePlaintextRegistration {
		registration = "ON: any plaintext xDS client may register as any workload (insecure; for development and tests only)"
		log.Warn("INSECURE: --insecure-plaintext-registration is on: any client of the plaintext xDS port may register as any workload and become an endpoint of any Service",
			"xds_addr", cfg.XDSAddr)
	}
	handler, err := api.New(api.Config{
		Store:                 st,
		Logger:                log.Named("api"),
		AllowRemote:           cfg.AdminAllowRemote,
		Token:                 token,
		Registry:              reg,
		Health:                map[string]string{"insecure-plaintext-registration": registration, "trust-domain": cfg.TrustDomain},
		PlaintextRegistration: cfg.InsecurePlaintextRegistration,
	})
	if err != nil {
		return err
	}
	// Services stored before pilot allocated VIPs (or while the range was
	// full) get one now; a failure leaves them reachable by name only and
	// does not stop pilot.
	if n, err := handler.AllocateStored(ctx); err != nil {
		log.Warn("stored Services left without a VIP", "allocated", n, "error", err)
	} else if n > 0 {
		log.Info("allocated VIPs of stored Services", "services", n)
	}
	if authority != nil {
		handler.Handle("/apis/ca/v1/", authority.Handler())
	}
	if cfg.AdminPprof {
		handler.Handle(PprofPath, pprofHandler())
	}

	adminLis, err := net.Listen("tcp", cfg.AdminAddr)
	if err != nil {
		return fmt.Errorf("admin listener on %s: %w", cfg.AdminAddr, err)
	}
	statusAPI, err := replicaStatus(ctx, cfg, st, tracker, adminLis.Addr(), token)
	if err != nil {
		adminLis.Close()
		return err
	}
	handler.Handle("/apis/status/v1/", statusAPI)
	var xdsLis, tlsLis net.Listener
	if cfg.XDS != nil {
		if xdsLis, err = net.Listen("tcp", cfg.XDSAddr); err != nil {
			_ = adminLis.Close()
			return fmt.Errorf("xDS listener on %s: %w", cfg.XDSAddr, err)
		}
		if authority != nil {
			if tlsLis, err = net.Listen("tcp", cfg.XDSTLSAddr); err != nil {
				_ = adminLis.Close()
				_ = xdsLis.Close()
				return fmt.Errorf("xDS TLS listener on %s: %w", cfg.XDSTLSAddr, err)
			}
		} else {
			log.Warn("no mesh CA: the TLS xDS listener is off, so no sidecar can register unless --insecure-plaintext-registration")
		}
	}

	var webhookLis net.Listener
	var hook *webhook.Handler
	if cfg.WebhookAddr != "" {
		if hook, err = webhook.New(webhook.Config{Logger: log.Named("webhook"), Registerer: reg,
			Settings: injectSettings(st, cfg.WebhookMesh, cfg.TrustDomain)}); err != nil {
			closeAll(adminLis, xdsLis, tlsLis)
			return err
		}
		if webhookLis, err = net.Listen("tcp", cfg.WebhookAddr); err != nil {
			closeAll(adminLis, xdsLis, tlsLis)
			return fmt.Errorf("injection webhook listener on %s: %w", cfg.WebhookAddr, err)
		}
	}

	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	srv := &http.Server{
		Handler:           handler,
		ReadHeaderTimeout: 10 * time.Second,
		ErrorLog:          log.Named("http").StandardLogger(&hclog.StandardLoggerOptions{InferLevels: true}),
	}

	var wg sync.WaitGroup
	errc := make(chan error, 4)
	wg.Go(func() { highwater.Follow(ctx, st, cfg.DataDir, served, highwaterInterval, log.Named("highwater")) })
	wg.Go(func() {
		if err := retention.Run(ctx, st, cfg.History, log.Named("retention")); err != nil {
			errc <- fmt.Errorf("history retention: %w", err)
		}
	})
	wg.Go(func() {
		log.Info("admin API listening", "addr", adminLis.Addr().String())
		if err := srv.Serve(adminLis); err != nil && !errors.Is(err, http.ErrServerClosed) {
			errc <- fmt.Errorf("admin API: %w", err)
		}
	})
	// A CA with timers (pilot/ca: CRL re-signing, its own certificates'
	// renewal) runs until shutdown, and Run waits for it.
	if r, ok := authority.(interface{ Run(context.Context) error }); ok {
		wg.Go(func() {
			if err := r.Run(ctx); err != nil {
				errc <- fmt.Errorf("mesh CA: %w", err)
			}
		})
	}
	if xdsLis != nil {
		wg.Go(func() {
			log.Info("xDS listening", "addr", xdsLis.Addr().String(), "tls", false)
			if tlsLis != nil {
				log.Info("xDS listening", "addr", tlsLis.Addr().String(), "tls", true)
			}
			env := XDSEnv{Store: st, Listener: xdsLis, TLSListener: tlsLis, Authority: authority, TrustDomain: cfg.TrustDomain,
				PlaintextRegistration: cfg.InsecurePlaintextRegistration, Registry: reg, Status: tracker, DataDir: cfg.DataDir, Logger: log.Named("xds"),
				RollbackEpoch: served.RollbackEpoch}
			if err := cfg.XDS(ctx, env); err != nil {
				errc <- fmt.Errorf("xDS: %w", err)
			}
		})
	}
	if webhookLis != nil {
		wg.Go(func() {
			log.Info("injection webhook listening", "addr", webhookLis.Addr().String(), "path", webhook.Path)
			if err := webhook.ServeTLS(ctx, webhookLis, hook, authority.ServingCert, log.Named("webhook")); err != nil {
				errc <- fmt.Errorf("injection webhook: %w", err)
			}
		})
	}
	if cfg.OnReady != nil {
		cfg.OnReady(adminLis.Addr())
	}
	if cfg.OnWebhookReady != nil && webhookLis != nil {
		cfg.OnWebhookReady(webhookLis.Addr())
	}
	if cfg.OnXDSReady != nil && xdsLis != nil {
		cfg.OnXDSReady(xdsLis.Addr())
	}
	if cfg.OnXDSTLSReady != nil && tlsLis != nil {
		cfg.OnXDSTLSReady(tlsLis.Addr())
	}

	var runErr error
	select {
	case <-ctx.Done():
		log.Info("shutting down")
	case runErr = <-errc:
		log.Error("server failed, shutting down", "error", runErr)
	}
	cancel()
	sctx, scancel := context.WithTimeout(context.WithoutCancel(ctx), cfg.ShutdownTimeout)
	defer scancel()
	if err := srv.Shutdown(sctx); err != nil {
		_ = srv.Close()
		runErr = errors.Join(runErr, fmt.Errorf("admin API shutdown: %w", err))
	}
	wg.Wait()
	close(errc)
	for err := range errc {
		runErr = errors.Join(runErr, err)
	}
	return runErr
}

// highwaterInterval coalesces writes of the served-revision record: a burst of
// applies costs one fsync'd write per interval. A regression inside the last
// interval before a crash is not caught (the record trails by at most this).
const highwaterInterval = 200 * time.Millisecond

// checkServed refuses a store behind pilot's record of what it served, or
// another store (an empty or replaced file), unless AcceptStoreRegression; it
// returns the record to keep, with the rollback epoch manifests carry.
func checkServed(cfg Config, st store.Store, head store.Revision) (highwater.Record, error) {
	idr, ok := st.(store.Identifier)
	if !ok {
		return highwater.Record{}, fmt.Errorf("store %T has no identity: pilot cannot tell it from another store", st)
	}
	rec, found, err := highwater.Load(cfg.DataDir)
	if err != nil {
		return highwater.Record{}, err
	}
	next, warn, err := highwater.Check(rec, found, idr.ID(), head, cfg.AcceptStoreRegression, time.Now())
	if err != nil {
		return highwater.Record{}, fmt.Errorf("store in %s: %w", cfg.DataDir, err)
	}
	if warn != "" {
		cfg.Logger.Warn("store regression accepted: sidecars will be told to take older revisions", "detail", warn, "rollback_epoch", next.RollbackEpoch)
	}
	if err := highwater.Save(cfg.DataDir, next); err != nil {
		return highwater.Record{}, err
	}
	return next, nil
}
