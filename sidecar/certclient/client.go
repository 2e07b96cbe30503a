// Package certclient obtains and renews the sidecar's workload certificate
// from pilot's CSR service (certs/csrrpc) and stores it in an svid.Holder.
//
// The private key is an ECDSA P-256 key made in this process for each CSR; it
// is written nowhere but, with Config.StateDir, to the sidecar's own state
// directory with its certificate, so a restart while pilot is away keeps mTLS
// until that certificate's NotAfter (persist.go). The CSR's only URI SAN is
// spiffe://<trust-domain>/ns/<namespace>/sa/<service-account>. It is sent over
// TLS to pilot's TLS xDS address, pilot verified against the trust roots
// (--ca-root, and the bundle pilot last delivered) and by its SPIFFE ID
// spiffe://<trust-domain>/weft/pilot. The first CSR is authenticated by the
// bootstrap token (--token-file, read afresh for every such CSR, so a rotated
// token file is used); a renewal by the current certificate as TLS client
// certificate. When the certificate expired before it could be renewed (pilot
// away), the token is used again.
//
// Timing (schedule.go, pure): renew at 50%..60% of the lifetime; a failed
// attempt retries after 0.5s, 1s, 2s, ... up to min(1m, lifetime/10). A new
// certificate is stored atomically: new connections use it, existing ones
// keep the one they were made with.
package certclient

import (
	"bytes"
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	mrand "math/rand/v2"
	"net/url"
	"os"
	"sync/atomic"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/spiffe/go-spiffe/v2/spiffeid"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"

	"github.com/weft-mesh/weft/certs/bundle"
	"github.com/weft-mesh/weft/certs/csrrpc"
	"github.com/weft-mesh/weft/certs/spiffe"
	"github.com/weft-mesh/weft/certs/token"
	"github.com/weft-mesh/weft/sidecar/svid"
)

// DefaultCallTimeout bounds one CSR (dial, handshake, call); MaxCallTimeout
// bounds the setting.
const (
	DefaultCallTimeout = 10 * time.Second
	MaxCallTimeout     = time.Minute
)

// CertificateMargin: a renewal presents the certificate only while it stays
// valid this much longer (pilot checks it during the handshake, which takes
// milliseconds); closer to NotAfter the token is used.
const CertificateMargin = time.Second

// Config of a Client; checked by New.
type Config struct {
	// Holder receives each new SVID; required.
	Holder *svid.Holder
	// TrustDomain, Namespace and ServiceAccount name the workload; the SPIFFE
	// ID asked for is spiffe.Workload of them.
	TrustDomain, Namespace, ServiceAccount string
	// TokenFile holds the bootstrap token (at most token.MaxBytes); required.
	TokenFile string
	// Trust returns the roots that verify pilot's serving certificate and the
	// chain it issues; required. It is called for every attempt.
	Trust func() (*bundle.Bundle, error)
	// Servers are pilot's TLS addresses (host:port), tried in turn, the next
	// one after a failure.
	Servers []string
	// Logger is required.
	Logger hclog.Logger
	// Registerer receives the client's metrics; optional.
	Registerer prometheus.Registerer
	// CallTimeout bounds one attempt; default DefaultCallTimeout.
	CallTimeout time.Duration
	// Now and Rand (uniform in [0, 1)) default to time.Now and math/rand/v2.
	Now  func() time.Time
	Rand func() float64
	// DialOptions are added to the CSR connection (tests).
	DialOptions []grpc.DialOption
	// StateDir, when set, keeps the certificate and key across restarts
	// (persist.go): each one stored is written there, and Run starts from it
	// while it is still good.
	StateDir string
}

// Client renews one workload certificate. Create with New, drive with Run.
type Client struct {
	cfg  Config
	id   spiffeid.ID
	pilt spiffeid.ID
	log  hclog.Logger

	attempts *prometheus.CounterVec
	next     prometheus.Gauge

	// Owned by Run.
	failures     int
	lastLifetime time.Duration
	jitter       float64   // RenewAt draw for the certificate held
	received     time.Time // when the certificate held was stored
	server       int       // index of the server to try next
	nextAt       atomic.Int64
}

// New checks cfg.
func New(cfg Config) (*Client, error) {
	bad := func(f string, a ...any) error { return fmt.Errorf("certclient: "+f, a...) }
	switch {
	case cfg.Holder == nil:
		return nil, bad("holder: required")
	case cfg.TokenFile == "":
		return nil, bad("token file: required")
	case cfg.Trust == nil:
		return nil, bad("trust: required")
	case len(cfg.Servers) == 0:
		return nil, bad("servers: at least one required")
	case cfg.Logger == nil:
		return nil, bad("logger: required")
	case cfg.CallTimeout < 0 || cfg.CallTimeout > MaxCallTimeout:
		return nil, bad("call timeout %s outside [0, %s]", cfg.CallTimeout, MaxCallTimeout)
	}
	id, err := spiffe.Workload(cfg.TrustDomain, cfg.Namespace, cfg.ServiceAccount)
	if err != nil {
		return nil, bad("workload SPIFFE ID: %w", err)
	}
	pid, err := spiffe.Pilot(cfg.TrustDomain)
	if err != nil {
		return nil, bad("pilot SPIFFE ID: %w", err)
	}
	if cfg.CallTimeout == 0 {
		cfg.CallTimeout = DefaultCallTimeout
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	if cfg.Rand == nil {
		cfg.Rand = mrand.Float64
	}
	c := &Client{cfg: cfg, id: id, pilt: pid, log: cfg.Logger.Named("certclient").With("spiffe_id", id.String()),
		attempts: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "weft_sidecar_certificate_requests_total",
			Help: "CSRs sent to pilot, by credential (token, certificate) and result (ok, error)."}, []string{"credential", "result"}),
		next: prometheus.NewGauge(prometheus.GaugeOpts{Name: "weft_sidecar_certificate_next_request_timestamp_seconds",
			Help: "When the next CSR (renewal or retry) is due, Unix seconds."}),
	}
	for _, cr := range []string{Token.String(), Certificate.String()} {
		for _, r := range []string{"ok", "error"} {
			c.attempts.WithLabelValues(cr, r)
		}
	}
	if cfg.Registerer != nil {
		for _, m := range []prometheus.Collector{c.attempts, c.next} {
			if err := cfg.Registerer.Register(m); err != nil {
				return nil, bad("metrics: %w", err)
			}
		}
	}
	return c, nil
}

// ID is the workload SPIFFE ID the client asks for.
func (c *Client) ID() spiffeid.ID { return c.id }

// NextAttempt is when the next CSR is due (zero before Run plans one).
func (c *Client) NextAttempt() time.Time {
	if n := c.nextAt.Load(); n != 0 {
		return time.Unix(0, n)
	}
	return time.Time{}
}

// Run obtains a certificate at once (or restores the persisted one, see
// Config.StateDir), then renews it, until ctx ends.
func (c *Client) Run(ctx context.Context) error {
	timer := time.NewTimer(0)
	defer timer.Stop()
	<-timer.C
	if c.cfg.StateDir != "" && c.cfg.Holder.Load() == nil {
		c.restore(c.cfg.Now())
	}
	for {
		now := c.cfg.Now()
		s := c.cfg.Holder.Load()
		u := c.jitter
		if c.failures > 0 {
			u = c.cfg.Rand()
		}
		at := NextAttempt(s, c.received, c.failures, c.lastLifetime, now, u)
		c.nextAt.Store(at.UnixNano())
		c.next.Set(float64(at.UnixNano()) / 1e9)
		timer.Reset(at.Sub(now))
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-timer.C:
		}
		cred := CredentialFor(c.cfg.Holder.Load(), c.cfg.Now(), CertificateMargin)
		ns, err := c.Attempt(ctx, cred)
		if ctx.Err() != nil {
			return ctx.Err()
		}
		if err != nil {
			c.failures++
			c.attempts.WithLabelValues(cred.String(), "error").Inc()
			c.server = (c.server + 1) % len(c.cfg.Servers)
			held := "none"
			if s := c.cfg.Holder.Load(); s != nil {
				held = fmt.Sprintf("serial %s, NotAfter %s", s.Cert.Leaf.SerialNumber, s.NotAfter.UTC().Format(time.RFC3339))
			}
			c.log.Warn("certificate request failed; retrying", "credential", cred, "failures", c.failures, "held", held, "error", err)
			continue
		}
		c.attempts.WithLabelValues(cred.String(), "ok").Inc()
		c.failures = 0
		c.received = c.cfg.Now()
		c.lastLifetime = Usable(ns, c.received)
		c.jitter = c.cfg.Rand()
		c.cfg.Holder.Store(ns)
		c.persist(ns)
		c.log.Info("workload certificate stored", "credential", cred, "serial", ns.Cert.Leaf.SerialNumber.String(),
			"not_after", ns.NotAfter.UTC().Format(time.RFC3339Nano), "usable", c.lastLifetime,
			"renew_at", RenewAt(ns, c.received, c.jitter).UTC().Format(time.RFC3339Nano))
	}
}

// Attempt makes one CSR with cred against the current server and returns the
// verified SVID; it does not store it.
func (c *Client) Attempt(ctx context.Context, cred Credential) (*svid.SVID, error) {
	ctx, cancel := context.WithTimeout(ctx, c.cfg.CallTimeout)
	defer cancel()
	var tok string
	var clientCert func(*tls.CertificateRequestInfo) (*tls.Certificate, error)
	if cred == Token {
		t, err := ReadToken(c.cfg.TokenFile)
		if err != nil {
			return nil, err
		}
		tok = t
	} else {
		held := c.cfg.Holder.Load()
		if held == nil {
			return nil, errors.New("certclient: renewal without a certificate")
		}
		// This attempt authenticates with the certificate it was planned with,
		// even if another is stored meanwhile.
		clientCert = func(*tls.CertificateRequestInfo) (*tls.Certificate, error) { return &held.Cert, nil }
	}
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, fmt.Errorf("certclient: generating key: %w", err)
	}
	csr, err := x509.CreateCertificateRequest(rand.Reader, &x509.CertificateRequest{URIs: []*url.URL{c.id.URL()}}, key)
	if err != nil {
		return nil, fmt.Errorf("certclient: CSR: %w", err)
	}
	trust, err := c.cfg.Trust()
	if err != nil {
		return nil, fmt.Errorf("certclient: trust roots: %w", err)
	}
	addr := c.cfg.Servers[c.server]
	tc := PilotTLS(c.pilt, func() (*bundle.Bundle, error) { return trust, nil }, clientCert, c.cfg.Now)
	opts := append([]grpc.DialOption{grpc.WithTransportCredentials(credentials.NewTLS(tc))}, c.cfg.DialOptions...)
	cc, err := grpc.NewClient(addr, opts...)
	if err != nil {
		return nil, fmt.Errorf("certclient: pilot %s: %w", addr, err)
	}
	defer cc.Close()
	chain, err := csrrpc.Sign(ctx, cc, csr, tok)
	if err != nil {
		return nil, fmt.Errorf("certclient: CSR for %s to pilot %s with %s: %w", c.id, addr, cred, err)
	}
	return c.check(chain, key, trust)
}

// check accepts an issued chain only if its leaf is for our key and our ID and
// it verifies against the roots peers will check it with.
func (c *Client) check(chain []*x509.Certificate, key *ecdsa.PrivateKey, trust *bundle.Bundle) (*svid.SVID, error) {
	if len(chain) == 0 {
		return nil, errors.New("certclient: pilot answered an empty chain")
	}
	leaf := chain[0]
	got, err := spiffe.FromCert(leaf)
	if err != nil {
		return nil, fmt.Errorf("certclient: issued certificate serial %s: %w", leaf.SerialNumber, err)
	}
	if got != c.id {
		return nil, fmt.Errorf("certclient: issued certificate serial %s is for %s, asked for %s", leaf.SerialNumber, got, c.id)
	}
	if _, err := trust.Verify(chain, c.cfg.Now()); err != nil {
		return nil, fmt.Errorf("certclient: issued certificate serial %s for %s does not verify against the trust roots: %w", leaf.SerialNumber, c.id, err)
	}
	s, err := svid.New(chain, key)
	if err != nil {
		return nil, fmt.Errorf("certclient: issued certificate: %w", err)
	}
	return s, nil
}

// ReadToken reads a bootstrap token file: at most token.MaxBytes, surrounding
// whitespace trimmed, not empty.
func ReadToken(path string) (string, error) {
	f, err := os.Open(path)
	if err != nil {
		return "", fmt.Errorf("token-file: %w", err)
	}
	defer f.Close()
	b, err := io.ReadAll(io.LimitReader(f, token.MaxBytes+1))
	if err != nil {
		return "", fmt.Errorf("token-file %s: %w", path, err)
	}
	if len(b) > token.MaxBytes {
		return "", fmt.Errorf("token-file %s: more than %d bytes", path, token.MaxBytes)
	}
	b = bytes.TrimSpace(b)
	if len(b) == 0 {
		return "", fmt.Errorf("token-file %s: empty", path)
	}
	return string(b), nil
}
