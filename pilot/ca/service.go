// Package ca is pilot's certificate authority service: the CSR service sidecars
// enroll and renew with (certs/csrrpc), the issued registry and revocations
// (persisted in <data-dir>/ca/; revocations also in the store when it keeps
// sets, shared by every replica on it: see shared.go), the CRL publisher, pilot's own serving and
// publisher certificates, and the admin API under /apis/ca/v1/.
//
// One goroutine (Run) owns the timers: the CRL is re-signed at half its
// validity and on every revocation or rotation; pilot's serving and publisher
// certificates are renewed at half their life; the issued registry is written
// at most every FlushInterval. Everything else is called from request
// goroutines and guarded by mu, which is never held across disk I/O or signing.
package ca

import (
	"context"
	"crypto/ecdsa"
	"crypto/ed25519"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/sha256"
	"crypto/tls"
	"crypto/x509"
	"encoding/hex"
	"errors"
	"fmt"
	"net"
	"path/filepath"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/spiffe/go-spiffe/v2/spiffeid"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/peer"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/weft-mesh/weft/certs/bundle"
	certca "github.com/weft-mesh/weft/certs/ca"
	"github.com/weft-mesh/weft/certs/csrrpc"
	"github.com/weft-mesh/weft/certs/manifest"
	"github.com/weft-mesh/weft/certs/revoke"
	"github.com/weft-mesh/weft/certs/spiffe"
	"github.com/weft-mesh/weft/certs/token"
	"github.com/weft-mesh/weft/internal/atomicfile"
	"github.com/weft-mesh/weft/internal/edkey"
	"github.com/weft-mesh/weft/pilot/store"
)

// Defaults.
const (
	DefaultTrustDomain = "cluster.local"
	DefaultCertTTL     = 24 * time.Hour
	DefaultMaxIssued   = 100_000
	// FlushInterval is how often at most the issued registry is written; a crash
	// loses at most the entries of the last interval (revocations are written
	// before they are acknowledged).
	FlushInterval = 2 * time.Second
	// UnknownSerialTTL is how long a revoked serial the registry does not know is
	// listed in the CRL: the longest a certificate can live.
	UnknownSerialTTL = certca.MaxTTL
	// MinCRLValidity bounds how often the CRL is re-signed (at half of it).
	MinCRLValidity = 2 * time.Second
	// ConfigPoll is how often at most Run looks again at CRLValidity (a
	// MeshConfig change reschedules the CRL within it).
	ConfigPoll = time.Second
)

// ServiceConfig configures New. DataDir is required; keyed literals.
type ServiceConfig struct {
	DataDir     string // pilot's data directory; the CA keeps its files in DataDir/ca
	TrustDomain string // DefaultTrustDomain when empty
	// Plugged-in CA (pilot's --ca-root-cert/--ca-root-key/--ca-chain); see certs/ca.Config.
	RootCertFile, RootKeyFile, ChainFile string
	// TokenKeyFile and PublisherKeyFile, when set, are existing ed25519 keys
	// (PKCS#8 PEM) used instead of the ones made in DataDir: pilot replicas on
	// one store share them (with the plugged-in root), so a bootstrap token
	// minted by one is accepted by all and they publish under one key.
	TokenKeyFile, PublisherKeyFile string
	// CertTTL is the lifetime of each certificate issued (MeshConfig.certificateTTL);
	// read on every issuance. nil or a result <= 0 means DefaultCertTTL; results
	// over certs/ca.MaxTTL are refused by the CA.
	CertTTL func() time.Duration
	// CRLValidity is NextUpdate-ThisUpdate of each CRL (MeshConfig.crlValidity);
	// read on every re-sign. nil or <= 0 means revoke.DefaultValidity; at least
	// MinCRLValidity.
	CRLValidity func() time.Duration
	MaxIssued   int // issued registry bound (--max-issued); DefaultMaxIssued when 0
	// TokenCSRs is how many CSRs one bootstrap token may make per
	// TokenCSRWindow; DefaultTokenCSRs when 0, at most MaxTokenCSRs.
	TokenCSRs int
	// ServingDNS and ServingIPs are the extra SANs of pilot's TLS serving
	// certificate (--tls-san), beside its SPIFFE ID spiffe://<td>/weft/pilot.
	ServingDNS []string
	ServingIPs []net.IP
	Now        func() time.Time // time.Now when nil
	Logger     hclog.Logger     // required
	// Registerer, when set, gets the CA's metrics (weft_pilot_ca_*).
	Registerer prometheus.Registerer
	// Revocations, when set (pilot passes its store when it implements
	// store.Sets), holds the revocations every replica on the store shares
	// (RevocationSet): a revocation is written there before it is
	// acknowledged, each CRL is built from it (read at signing; a failed read
	// signs no CRL), and a change by another replica is seen within
	// SharedPoll. nil: revocations are this pilot's own (DataDir/ca).
	Revocations store.Sets
	// SharedPoll is how often the set's revision is read
	// (DefaultSharedPoll when 0; MinSharedPoll..MaxSharedPoll).
	SharedPoll time.Duration
}

// Trust is what sidecars are sent as the ROOTCA Secret: the bundle and the CRL
// signed by the current signer. Immutable; Version changes when either does.
type Trust struct {
	Version   string
	BundlePEM []byte
	CRLPEM    []byte
}

// leafCert is one of pilot's own certificates with its key.
type leafCert struct {
	tls      tls.Certificate // Leaf set
	chain    []*x509.Certificate
	issuedAt time.Time
}

// Service is pilot's CA. Create with New, run Run in a goroutine.
type Service struct {
	cfg      ServiceConfig
	dir      string
	td       spiffeid.TrustDomain
	log      hclog.Logger
	now      func() time.Time
	ca       *certca.CA
	tokenKey ed25519.PrivateKey
	pubKey   ed25519.PrivateKey // manifest signing key (certs/manifest, in DataDir)

	pilotID, publisherID spiffeid.ID

	mu        sync.Mutex // guards reg, tokens, crlNumber, sharedRev, issuedDirty, changed
	reg       *registry
	tokens    *tokenUses
	crlNumber int64
	sharedRev store.Revision // revision of cfg.Revocations the registry's revocations were read at
	pollAt    time.Time      // Run's goroutine only: next read of the set's revision
	// pollFailing (Run's goroutine only): the last poll failed.
	pollFailing bool
	// changed is closed (and replaced) on every Trust change.
	changed chan struct{}

	trust     atomic.Pointer[Trust]
	crl       atomic.Pointer[revoke.CRL]
	serving   atomic.Pointer[leafCert]
	publisher atomic.Pointer[leafCert]

	publishMu sync.Mutex    // serialises CRL builds and revocations' file writes (held across their disk I/O; never on the CSR path)
	flushMu   sync.Mutex    // serialises issued.json writes
	crlSoon   chan struct{} // cap 1: ask Run to recompute its timers
	dirty     chan struct{} // cap 1: the registry changed, flush it
	crlDue    atomic.Int64  // unix nanos when the current CRL is re-signed
	metrics   *metrics
}

// New opens the CA in cfg.DataDir/ca (creating the root and the token key on
// first start), loads the registry and revocations, and signs a first CRL and
// pilot's own certificates.
func New(cfg ServiceConfig) (*Service, error) {
	if cfg.DataDir == "" {
		return nil, errors.New("pilot ca: DataDir is required")
	}
	if cfg.Logger == nil {
		return nil, errors.New("pilot ca: a Logger is required")
	}
	if cfg.TrustDomain == "" {
		cfg.TrustDomain = DefaultTrustDomain
	}
	if cfg.MaxIssued == 0 {
		cfg.MaxIssued = DefaultMaxIssued
	}
	if cfg.TokenCSRs == 0 {
		cfg.TokenCSRs = DefaultTokenCSRs
	}
	if cfg.TokenCSRs < 0 || cfg.TokenCSRs > MaxTokenCSRs {
		return nil, fmt.Errorf("pilot ca: TokenCSRs %d outside 1..%d", cfg.TokenCSRs, MaxTokenCSRs)
	}
	if cfg.MaxIssued < 0 {
		return nil, fmt.Errorf("pilot ca: MaxIssued %d is negative", cfg.MaxIssued)
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	if cfg.SharedPoll == 0 {
		cfg.SharedPoll = DefaultSharedPoll
	}
	if cfg.SharedPoll < MinSharedPoll || cfg.SharedPoll > MaxSharedPoll {
		return nil, fmt.Errorf("pilot ca: SharedPoll %v outside %v..%v", cfg.SharedPoll, MinSharedPoll, MaxSharedPoll)
	}
	if len(cfg.ServingDNS) > certca.MaxDNSNames || len(cfg.ServingIPs) > certca.MaxIPs {
		return nil, fmt.Errorf("pilot ca: %d DNS and %d IP serving SANs, over the bounds of %d and %d", len(cfg.ServingDNS), len(cfg.ServingIPs), certca.MaxDNSNames, certca.MaxIPs)
	}
	dir := filepath.Join(cfg.DataDir, "ca")
	c, err := certca.Open(certca.Config{Dir: dir, TrustDomain: cfg.TrustDomain, RootCertFile: cfg.RootCertFile, RootKeyFile: cfg.RootKeyFile, ChainFile: cfg.ChainFile, Now: cfg.Now, Logger: cfg.Logger.Named("ca")})
	if err != nil {
		return nil, fmt.Errorf("pilot ca: %w", err)
	}
	s := &Service{cfg: cfg, dir: dir, td: c.TrustDomain(), log: cfg.Logger, now: cfg.Now, ca: c,
		reg: newRegistry(cfg.MaxIssued), tokens: newTokenUses(cfg.TokenCSRs), changed: make(chan struct{}), crlSoon: make(chan struct{}, 1), dirty: make(chan struct{}, 1)}
	if s.pilotID, err = spiffe.Pilot(cfg.TrustDomain); err != nil {
		return nil, fmt.Errorf("pilot ca: %w", err)
	}
	if s.publisherID, err = spiffe.Publisher(cfg.TrustDomain); err != nil {
		return nil, fmt.Errorf("pilot ca: %w", err)
	}
	if cfg.TokenKeyFile != "" {
		s.tokenKey, err = edkey.Load(cfg.TokenKeyFile, "token key")
	} else {
		s.tokenKey, _, err = edkey.LoadOrCreate(filepath.Join(dir, TokenKeyFile), "token key")
	}
	if err != nil {
		return nil, fmt.Errorf("pilot ca: %w", err)
	}
	if cfg.PublisherKeyFile != "" {
		if s.pubKey, err = edkey.Load(cfg.PublisherKeyFile, "publisher key"); err == nil {
			// Sidecars may pin the key from <data-dir>/publisher.pub, as with one pilot.
			err = manifest.WritePublicKey(filepath.Join(cfg.DataDir, manifest.PublicKeyFile), s.pubKey.Public().(ed25519.PublicKey))
		}
	} else {
		s.pubKey, err = manifest.LoadOrCreateKey(cfg.DataDir)
	}
	if err != nil {
		return nil, fmt.Errorf("pilot ca: %w", err)
	}
	if s.crlNumber, err = s.reg.load(dir); err != nil {
		return nil, fmt.Errorf("pilot ca: %w", err)
	}
	if cfg.Revocations != nil {
		// What this replica revoked before it shared (its own file) joins the
		// set: a revocation is never dropped by starting to share.
		now := s.now()
		s.reg.prune(now)
		recs, err := revocationRecords(s.reg.sortedRevoked(), nil, now)
		if err != nil {
			return nil, fmt.Errorf("pilot ca: %w", err)
		}
		for id, at := range s.reg.ids {
			r, err := idRecord(id, at)
			if err != nil {
				return nil, fmt.Errorf("pilot ca: %w", err)
			}
			recs = append(recs, r)
		}
		if err := writeRecords(cfg.Revocations, recs, nil); err != nil {
			return nil, err
		}
	}
	if err := s.renewServing(); err != nil {
		return nil, err
	}
	if err := s.renewPublisher(); err != nil {
		return nil, err
	}
	if err := s.publishCRL(); err != nil {
		return nil, err
	}
	if err := s.register(cfg.Registerer); err != nil {
		return nil, err
	}
	s.log.Info("mesh CA service ready", "trust_domain", s.td.String(), "issued", len(s.reg.issued), "revoked", len(s.reg.revoked), "crl_number", s.crlNumber)
	return s, nil
}

// CA is the underlying certificate authority.
func (s *Service) CA() *certca.CA { return s.ca }

// Bundle is the current trust bundle (pilot's TLS listener verifies clients with it).
func (s *Service) Bundle() *bundle.Bundle { return s.ca.Bundle() }

// CRL is the current parsed CRL.
func (s *Service) CRL() *revoke.CRL { return s.crl.Load() }

// TokenPublicKey verifies bootstrap tokens.
func (s *Service) TokenPublicKey() ed25519.PublicKey { return s.tokenKey.Public().(ed25519.PublicKey) }

// Trust is the bundle and CRL now.
func (s *Service) Trust() *Trust { return s.trust.Load() }

// TrustChanged is closed (and replaced) on every change of Trust: take it, then
// read Trust, then wait on it.
func (s *Service) TrustChanged() <-chan struct{} {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.changed
}

// Register serves the CSR service on g.
func (s *Service) Register(g *grpc.Server) { g.RegisterService(&csrrpc.ServiceDesc, s) }

// ServingCert is pilot's current TLS serving certificate (SPIFFE ID
// spiffe://<td>/weft/pilot plus ServingDNS/ServingIPs), renewed at half life.
// It has tls.Config.GetCertificate's signature: each handshake gets the current
// certificate, so a renewal applies to new connections. hello may be nil.
func (s *Service) ServingCert(*tls.ClientHelloInfo) (*tls.Certificate, error) {
	return &s.serving.Load().tls, nil // immutable: a renewal stores a new leafCert
}

// ClientCAs is the current trust bundle as a pool (during a rotation old and
// new roots), for verifying client certificates per handshake.
func (s *Service) ClientCAs() *x509.CertPool { return s.ca.Bundle().Pool() }

// Publisher is the manifest signing key (certs/manifest's key in the data
// directory) and its chain from the CA (leaf first, SPIFFE ID
// spiffe://<td>/weft/publisher), renewed at half life; call it per signing.
func (s *Service) Publisher() (ed25519.PrivateKey, []*x509.Certificate) {
	return s.pubKey, s.publisher.Load().chain
}

// IssueToken signs a bootstrap token for ns/sa valid for ttl from now
// (token.DefaultTTL when 0).
func (s *Service) IssueToken(ns, sa string, ttl time.Duration) (string, token.Claims, error) {
	if ttl == 0 {
		ttl = token.DefaultTTL
	}
	now := s.now()
	c := token.Claims{TrustDomain: s.td.String(), Namespace: ns, ServiceAccount: sa, IssuedAt: now, Expiry: now.Add(ttl)}
	tok, err := token.Issue(s.tokenKey, c)
	if err != nil {
		return "", token.Claims{}, err
	}
	c, err = token.Verify(tok, s.TokenPublicKey(), s.td.String(), now)
	if err != nil {
		return "", token.Claims{}, fmt.Errorf("issue token: %w", err)
	}
	s.log.Info("bootstrap token issued", "namespace", ns, "service_account", sa, "jti", c.ID, "expires", c.Expiry)
	return tok, c, nil
}

func (s *Service) certTTL() time.Duration {
	if s.cfg.CertTTL != nil {
		if d := s.cfg.CertTTL(); d > 0 {
			return d
		}
	}
	return DefaultCertTTL
}

func (s *Service) crlValidity() time.Duration {
	d := revoke.DefaultValidity
	if s.cfg.CRLValidity != nil {
		if v := s.cfg.CRLValidity(); v > 0 {
			d = v
		}
	}
	return max(d, MinCRLValidity)
}

// Sign is the CSR RPC (csrrpc.Server).
func (s *Service) Sign(ctx context.Context, req *wrapperspb.BytesValue) (*wrapperspb.BytesValue, error) {
	out, err := s.sign(ctx, req)
	s.metrics.csr.WithLabelValues(resultOf(err)).Inc()
	return out, err
}

func (s *Service) sign(ctx context.Context, req *wrapperspb.BytesValue) (*wrapperspb.BytesValue, error) {
	der := req.GetValue()
	if len(der) > csrrpc.MaxCSRBytes {
		return nil, status.Errorf(codes.InvalidArgument, "csr: %d bytes, over the bound of %d", len(der), csrrpc.MaxCSRBytes)
	}
	csr, err := x509.ParseCertificateRequest(der)
	if err != nil {
		return nil, status.Errorf(codes.InvalidArgument, "csr: %v", err)
	}
	grant, node, err := s.authenticate(ctx)
	if err != nil {
		s.log.Warn("CSR refused", "error", err)
		return nil, err
	}
	if err := certca.CheckCSR(csr, grant); err != nil {
		s.log.Warn("CSR refused", "granted", grant.String(), "node", node, "error", err)
		return nil, status.Error(codes.PermissionDenied, err.Error())
	}
	if pub, ok := csr.PublicKey.(*ecdsa.PublicKey); !ok || pub.Curve != elliptic.P256() {
		return nil, status.Errorf(codes.InvalidArgument, "csr for %s: key is %T, want ECDSA P-256", grant, csr.PublicKey)
	}
	if err := csr.CheckSignature(); err != nil {
		return nil, status.Errorf(codes.InvalidArgument, "csr for %s: signature: %v", grant, err)
	}
	ttl := s.certTTL()
	if ttl > certca.MaxTTL {
		return nil, status.Errorf(codes.FailedPrecondition, "certificateTTL %v is over the CA's bound of %v", ttl, certca.MaxTTL)
	}
	chain, err := s.issue(func() ([]*x509.Certificate, error) { return s.ca.Sign(csr, grant, ttl) }, node, false)
	if err != nil {
		if errors.Is(err, ErrRegistryFull) {
			return nil, status.Error(codes.ResourceExhausted, err.Error())
		}
		// What the CSR could get wrong is checked above: this is the CA's own
		// failure (an expired signer, a broken key).
		s.log.Error("signing a CSR", "spiffe_id", grant.String(), "error", err)
		return nil, status.Errorf(codes.Internal, "sign %s: %v", grant, err)
	}
	s.log.Info("certificate issued", "spiffe_id", grant.String(), "serial", serialKey(chain[0].SerialNumber), "not_after", chain[0].NotAfter, "node", node)
	return wrapperspb.Bytes(certca.EncodeChain(chain)), nil
}

// authenticate returns the SPIFFE ID the caller's credential grants: a
// bootstrap token's namespace/service account, else the verified workload
// certificate of the TLS connection.
func (s *Service) authenticate(ctx context.Context) (spiffeid.ID, string, error) {
	now := s.now()
	addr := "unknown"
	p, hasPeer := peer.FromContext(ctx)
	if hasPeer && p.Addr != nil {
		addr = p.Addr.String()
	}
	tok, err := csrrpc.BearerToken(ctx)
	if err != nil {
		return spiffeid.ID{}, "", status.Error(codes.Unauthenticated, err.Error())
	}
	if tok != "" {
		c, err := token.Verify(tok, s.TokenPublicKey(), s.td.String(), now)
		if err != nil {
			return spiffeid.ID{}, "", status.Errorf(codes.Unauthenticated, "bootstrap token from %s: %v", addr, err)
		}
		id, err := spiffe.Workload(s.td.String(), c.Namespace, c.ServiceAccount)
		if err != nil {
			return spiffeid.ID{}, "", status.Errorf(codes.Unauthenticated, "bootstrap token %s: %v", c.ID, err)
		}
		sum := sha256.Sum256([]byte(tok))
		s.mu.Lock()
		at, revoked := s.reg.idRevokedSince(id, c.IssuedAt)
		var useErr error
		if !revoked {
			useErr = s.tokens.take(string(sum[:]), c.Expiry, now)
		}
		s.mu.Unlock()
		if revoked {
			return spiffeid.ID{}, "", status.Errorf(codes.PermissionDenied, "bootstrap token %s for %s was issued at %v, before %s was revoked at %v: issue a new token", c.ID, id, c.IssuedAt.UTC(), id, at.UTC())
		}
		if useErr != nil {
			return spiffeid.ID{}, "", status.Errorf(codes.ResourceExhausted, "bootstrap token %s for %s from %s: %v", c.ID, id, addr, useErr)
		}
		return id, fmt.Sprintf("token %s from %s", c.ID, addr), nil
	}
	var chain []*x509.Certificate
	if hasPeer {
		if ti, ok := p.AuthInfo.(credentials.TLSInfo); ok {
			chain = ti.State.PeerCertificates
		}
	}
	if len(chain) == 0 {
		return spiffeid.ID{}, "", status.Errorf(codes.Unauthenticated, "CSR from %s: no bootstrap token and no TLS client certificate", addr)
	}
	// Verified again here against the current bundle whatever the listener did:
	// a certificate from a root dropped by a finished rotation renews no more.
	id, err := s.ca.Bundle().Verify(chain, now)
	if err != nil {
		return spiffeid.ID{}, "", status.Errorf(codes.Unauthenticated, "CSR from %s: client certificate: %v", addr, err)
	}
	if _, _, err := spiffe.ParseWorkload(id); err != nil {
		return spiffeid.ID{}, "", status.Errorf(codes.PermissionDenied, "CSR from %s: %v", addr, err)
	}
	leaf := chain[0]
	s.mu.Lock()
	revoked := s.reg.isRevoked(leaf.SerialNumber)
	at, idRevoked := s.reg.idRevokedSince(id, leaf.NotBefore.Add(certca.Backdate))
	s.mu.Unlock()
	if revoked {
		return spiffeid.ID{}, "", status.Errorf(codes.PermissionDenied, "CSR from %s: client certificate serial %s (%s) is revoked", addr, serialKey(leaf.SerialNumber), id)
	}
	if idRevoked {
		return spiffeid.ID{}, "", status.Errorf(codes.PermissionDenied, "CSR from %s: client certificate serial %s was issued before %s was revoked at %v", addr, serialKey(leaf.SerialNumber), id, at.UTC())
	}
	return id, fmt.Sprintf("renewal of %s from %s", serialKey(leaf.SerialNumber), addr), nil
}

// issue signs with sign and records the leaf; a full registry refuses before
// signing.
func (s *Service) issue(sign func() ([]*x509.Certificate, error), node string, internal bool) ([]*x509.Certificate, error) {
	now := s.now()
	s.mu.Lock()
	if len(s.reg.issued) >= s.reg.max {
		s.reg.dropExpired(now)
	}
	full := len(s.reg.issued) >= s.reg.max
	n := len(s.reg.issued)
	s.mu.Unlock()
	if full && !internal {
		return nil, fmt.Errorf("%w: %d unexpired certificates (--max-issued %d); new ones are refused until some expire", ErrRegistryFull, n, s.reg.max)
	}
	chain, err := sign()
	if err != nil {
		return nil, err
	}
	leaf := chain[0]
	e := &Issued{Serial: leaf.SerialNumber, NotBefore: leaf.NotBefore, NotAfter: leaf.NotAfter, Issuer: serialKey(s.ca.Signer().SerialNumber), Node: node, Internal: internal}
	e.ID, _ = spiffe.FromCert(leaf)
	if issuer := findIssuer(chain, s.ca.Bundle()); issuer != nil {
		e.Issuer = serialKey(issuer.SerialNumber)
	}
	s.mu.Lock()
	err = s.reg.add(e, now)
	if err != nil && internal {
		// pilot's own certificates are never refused (pilot must serve); they
		// replace the oldest entry instead.
		s.reg.dropOldest()
		err = s.reg.add(e, now)
	}
	s.mu.Unlock()
	if err != nil {
		return nil, err
	}
	select {
	case s.dirty <- struct{}{}:
	default:
	}
	return chain, nil
}

// findIssuer is the certificate of the bundle, else of the chain, that signed
// chain[0] (the bundle first: during a rotation the chain's cross certificate
// has the new root's key too, and the registry counts leaves by root).
func findIssuer(chain []*x509.Certificate, b *bundle.Bundle) *x509.Certificate {
	for _, c := range append(b.Roots(), chain[1:]...) {
		if chain[0].CheckSignatureFrom(c) == nil {
			return c
		}
	}
	return nil
}

func (s *Service) renewServing() error {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return fmt.Errorf("pilot ca: serving key: %w", err)
	}
	chain, err := s.issue(func() ([]*x509.Certificate, error) {
		return s.ca.SignKey(key.Public(), s.pilotID, s.cfg.ServingDNS, s.cfg.ServingIPs, s.certTTL())
	}, "pilot serving", true)
	if err != nil {
		return fmt.Errorf("pilot ca: serving certificate: %w", err)
	}
	s.serving.Store(&leafCert{tls: tlsCert(chain, key), chain: chain, issuedAt: s.now()})
	s.log.Info("pilot serving certificate issued", "serial", serialKey(chain[0].SerialNumber), "not_after", chain[0].NotAfter)
	return nil
}

func (s *Service) renewPublisher() error {
	chain, err := s.issue(func() ([]*x509.Certificate, error) {
		return s.ca.SignKey(s.pubKey.Public(), s.publisherID, nil, nil, s.certTTL())
	}, "pilot publisher", true)
	if err != nil {
		return fmt.Errorf("pilot ca: publisher certificate: %w", err)
	}
	s.publisher.Store(&leafCert{tls: tlsCert(chain, s.pubKey), chain: chain, issuedAt: s.now()})
	s.log.Info("publisher certificate issued", "serial", serialKey(chain[0].SerialNumber), "not_after", chain[0].NotAfter, "key_id", manifest.KeyID(s.pubKey.Public().(ed25519.PublicKey)))
	return nil
}

func tlsCert(chain []*x509.Certificate, key any) tls.Certificate {
	c := tls.Certificate{PrivateKey: key, Leaf: chain[0]}
	for _, x := range chain {
		c.Certificate = append(c.Certificate, x.Raw)
	}
	return c
}

// publishCRL prunes, signs a new CRL (number+1) with the current signer,
// persists the number and the revocations, and publishes the Trust.
func (s *Service) publishCRL() error {
	s.publishMu.Lock()
	defer s.publishMu.Unlock()
	now := s.now()
	if s.cfg.Revocations != nil {
		if err := s.refreshShared(now); err != nil {
			return err // no CRL signed from a set not read: the last one expires, sidecars fail closed
		}
	}
	s.mu.Lock()
	s.reg.prune(now)
	if s.cfg.Revocations != nil {
		n, err := crlNumberFor(s.sharedRev, now)
		if err != nil {
			s.mu.Unlock()
			return fmt.Errorf("pilot ca: %w", err)
		}
		s.crlNumber = n
	} else {
		s.crlNumber++
	}
	number := s.crlNumber
	entries := s.reg.crlEntries()
	revs := s.reg.sortedRevoked()
	ids := make(map[spiffeid.ID]time.Time, len(s.reg.ids))
	for k, v := range s.reg.ids {
		ids[k] = v
	}
	s.mu.Unlock()
	if err := s.writeRevocations(number, revs, ids); err != nil {
		return err
	}
	validity := s.crlValidity()
	signer, key := s.ca.CRLSigner()
	der, err := revoke.Build(signer, key, number, entries, now, validity)
	if err != nil {
		return fmt.Errorf("pilot ca: %w", err)
	}
	b := s.ca.Bundle()
	crl, err := revoke.Parse(der, b)
	if err != nil {
		return fmt.Errorf("pilot ca: the CRL just signed does not verify: %w", err)
	}
	sum := sha256.New()
	sum.Write(b.PEM())
	sum.Write(der)
	t := &Trust{Version: fmt.Sprintf("%d-%s", number, hex.EncodeToString(sum.Sum(nil)[:6])), BundlePEM: b.PEM(), CRLPEM: revoke.PEM(der)}
	s.crl.Store(crl)
	s.trust.Store(t)
	s.crlDue.Store(now.Add(validity / 2).UnixNano())
	s.mu.Lock()
	close(s.changed)
	s.changed = make(chan struct{})
	s.mu.Unlock()
	select {
	case s.crlSoon <- struct{}{}:
	default:
	}
	s.log.Debug("CRL published", "number", number, "entries", len(entries), "next_update", crl.NextUpdate(), "trust_version", t.Version)
	return nil
}

func (s *Service) writeRevocations(number int64, revs []Revocation, ids map[spiffeid.ID]time.Time) error {
	b, err := encodeRevocations(number, revs, ids)
	if err != nil {
		return fmt.Errorf("pilot ca: %w", err)
	}
	if err := atomicfile.Write(filepath.Join(s.dir, RevocationsFile), b, 0o600); err != nil {
		return fmt.Errorf("pilot ca: %w", err)
	}
	return nil
}

// flushIssued writes the issued registry.
func (s *Service) flushIssued() error {
	s.flushMu.Lock()
	defer s.flushMu.Unlock()
	s.mu.Lock()
	entries := make([]*Issued, 0, len(s.reg.issued))
	for _, e := range s.reg.issued {
		entries = append(entries, e) // immutable: shared, sorted outside the lock
	}
	s.mu.Unlock()
	sortIssued(entries)
	b, err := encodeIssued(entries)
	if err != nil {
		return fmt.Errorf("pilot ca: %w", err)
	}
	if err := atomicfile.Write(filepath.Join(s.dir, IssuedFile), b, 0o600); err != nil {
		return fmt.Errorf("pilot ca: %w", err)
	}
	return nil
}

// Run re-signs the CRL, renews pilot's certificates and flushes the registry
// until ctx ends (then flushes once more). Failures are logged and retried at
// the next tick (every second at most).
func (s *Service) Run(ctx context.Context) error {
	var lastFlush time.Time
	pending := false
	timer := time.NewTimer(0)
	defer timer.Stop()
	for {
		now := s.now()
		next := s.step(now)
		if pending {
			flushAt := lastFlush.Add(FlushInterval)
			if !now.Before(flushAt) {
				if err := s.flushIssued(); err != nil {
					s.log.Error("writing the issued registry", "error", err)
				}
				lastFlush, pending = now, false
			} else if flushAt.Before(next) {
				next = flushAt
			}
		}
		// At most ConfigPoll: CertTTL and CRLValidity may change at any time.
		timer.Reset(min(max(next.Sub(now), 10*time.Millisecond), ConfigPoll))
		select {
		case <-ctx.Done():
			if err := s.flushIssued(); err != nil {
				return err
			}
			return nil
		case <-timer.C:
		case <-s.crlSoon:
		case <-s.dirty:
			pending = true
		}
	}
}

// step does what is due at now and returns when it should run next.
func (s *Service) step(now time.Time) time.Time {
	retry := now.Add(time.Second)
	next := time.Unix(0, s.crlDue.Load())
	// A shorter crlValidity in MeshConfig applies from now, not after the
	// current CRL's own half-life.
	if due := s.crl.Load().ThisUpdate().Add(s.crlValidity() / 2); due.Before(next) {
		next = due
	}
	if !now.Before(next) {
		if err := s.publishCRL(); err != nil {
			s.log.Error("re-signing the CRL", "error", err)
			return retry
		}
		next = time.Unix(0, s.crlDue.Load())
	}
	if s.cfg.Revocations != nil {
		if !now.Before(s.pollAt) {
			s.pollAt = now.Add(s.cfg.SharedPoll)
			// Logged when it starts and stops failing, not every poll.
			switch err := s.pollShared(); {
			case err != nil && !s.pollFailing:
				s.log.Error("following the shared revocations (retried every poll; the CRL is not re-signed until the set is read)", "error", err)
				s.pollFailing = true
			case err == nil && s.pollFailing:
				s.log.Info("following the shared revocations again")
				s.pollFailing = false
			}
		}
		if s.pollAt.Before(next) {
			next = s.pollAt
		}
	}
	for _, c := range []struct {
		cur   *atomic.Pointer[leafCert]
		renew func() error
		what  string
	}{{&s.serving, s.renewServing, "serving"}, {&s.publisher, s.renewPublisher, "publisher"}} {
		due := renewAt(c.cur.Load())
		if !now.Before(due) {
			if err := c.renew(); err != nil {
				s.log.Error("renewing pilot's certificate", "which", c.what, "error", err)
				return retry
			}
			due = renewAt(c.cur.Load())
		}
		if due.Before(next) {
			next = due
		}
	}
	return next
}

// renewAt is half way through a certificate's life from when it was issued.
func renewAt(c *leafCert) time.Time {
	return c.issuedAt.Add(c.tls.Leaf.NotAfter.Sub(c.issuedAt) / 2)
}

// Revoke revokes one serial (by hex string, see ParseSerial) or every
// certificate of one SPIFFE ID, persists it and publishes a new CRL before it
// returns. Exactly one of serial and id must be set.
func (s *Service) Revoke(serial, id, reason string) ([]Revocation, int64, error) {
	code, err := ParseReason(reason)
	if err != nil {
		return nil, 0, fmt.Errorf("%w: %v", errInvalid, err)
	}
	switch {
	case (serial == "") == (id == ""):
		return nil, 0, fmt.Errorf("%w: give exactly one of serial and spiffeId", errInvalid)
	case serial != "":
		n, err := ParseSerial(serial)
		if err != nil {
			return nil, 0, fmt.Errorf("%w: %v", errInvalid, err)
		}
		s.publishMu.Lock() // a refresh of the shared set waits for this write
		s.mu.Lock()
		v, added, err := s.reg.revokeSerial(n, code, s.now(), UnknownSerialTTL)
		s.mu.Unlock()
		if err == nil {
			err = s.share([]Revocation{v}, nil, time.Time{})
		}
		s.publishMu.Unlock()
		if err != nil {
			return nil, 0, err
		}
		if added {
			s.log.Warn("certificate revoked", "serial", serialKey(n), "spiffe_id", v.ID, "reason", code)
		}
		return s.afterRevoke([]Revocation{v})
	default:
		sid, err := spiffeid.FromString(id)
		if err != nil {
			return nil, 0, fmt.Errorf("%w: spiffeId %q: %v", errInvalid, id, err)
		}
		if sid.TrustDomain() != s.td {
			return nil, 0, fmt.Errorf("%w: spiffeId %s: trust domain %s, this CA's is %s", errInvalid, sid, sid.TrustDomain(), s.td)
		}
		s.publishMu.Lock()
		now := s.now()
		s.mu.Lock()
		revs, err := s.reg.revokeID(sid, code, now)
		s.mu.Unlock()
		if err == nil {
			err = s.share(revs, &sid, now)
		}
		s.publishMu.Unlock()
		s.log.Warn("SPIFFE ID revoked", "spiffe_id", sid.String(), "serials", len(revs), "reason", code)
		if err != nil {
			return nil, 0, err
		}
		return s.afterRevoke(revs)
	}
}

// share writes a revocation to the shared set (when there is one) before it
// is acknowledged. publishMu is held.
func (s *Service) share(revs []Revocation, id *spiffeid.ID, at time.Time) error {
	if s.cfg.Revocations == nil {
		return nil
	}
	recs, err := revocationRecords(revs, id, at)
	if err != nil {
		return fmt.Errorf("pilot ca: %w", err)
	}
	return writeRecords(s.cfg.Revocations, recs, nil)
}

// refreshShared replaces the registry's revocations with the shared set's,
// adds to the set the serials this replica issued under a SPIFFE ID another
// replica revoked, and deletes the records no verifier needs any more.
// publishMu is held.
func (s *Service) refreshShared(now time.Time) error {
	ctx, cancel := context.WithTimeout(context.Background(), SharedTimeout)
	recs, rev, err := s.cfg.Revocations.SetList(ctx, RevocationSet)
	cancel()
	if err != nil {
		return fmt.Errorf("pilot ca: reading the shared revocations: %w", err)
	}
	revoked, ids, err := decodeSet(recs)
	if err != nil {
		return fmt.Errorf("pilot ca: %w", err)
	}
	expired := expiredRecords(revoked, ids, now)
	s.mu.Lock()
	s.reg.revoked, s.reg.ids, s.sharedRev = revoked, ids, rev
	stragglers := s.reg.idStragglers(now, certca.Backdate)
	for _, v := range stragglers {
		s.reg.revoked[serialKey(v.Serial)] = v
	}
	s.mu.Unlock()
	if len(stragglers) > 0 {
		// Listed in this replica's CRL now; in the others' once they read the set.
		recs, err := revocationRecords(stragglers, nil, now)
		if err != nil {
			return fmt.Errorf("pilot ca: %w", err)
		}
		if err := writeRecords(s.cfg.Revocations, recs, nil); err != nil {
			return err
		}
		s.log.Warn("certificates of a revoked SPIFFE ID added to the shared revocations", "serials", len(stragglers))
	}
	if len(expired) > 0 {
		// Any replica may delete them, twice is harmless; a failure only keeps
		// them listed longer.
		if err := writeRecords(s.cfg.Revocations, nil, expired); err != nil {
			s.log.Warn("deleting expired shared revocations", "records", len(expired), "error", err)
		}
	}
	return nil
}

// pollShared reads the shared set's revision and re-signs the CRL when another
// replica changed it.
func (s *Service) pollShared() error {
	ctx, cancel := context.WithTimeout(context.Background(), SharedTimeout)
	rev, err := s.cfg.Revocations.SetRevision(ctx, RevocationSet)
	cancel()
	if err != nil {
		return fmt.Errorf("pilot ca: reading the shared revocations' revision: %w", err)
	}
	s.mu.Lock()
	same := rev == s.sharedRev
	s.mu.Unlock()
	if same {
		return nil
	}
	return s.publishCRL()
}

func (s *Service) afterRevoke(revs []Revocation) ([]Revocation, int64, error) {
	if err := s.publishCRL(); err != nil {
		return nil, 0, err
	}
	return revs, s.crl.Load().Number(), nil
}

var errInvalid = errors.New("invalid")

// StartRotation starts a root rotation: a new root signs from now on, the
// bundle carries both; pilot's own certificates are reissued from the new root
// and a new CRL is published.
func (s *Service) StartRotation() error {
	if err := s.ca.StartRotation(); err != nil {
		return err
	}
	return s.afterRotation()
}

// ErrOldRootInUse refuses FinishRotation while workloads hold certificates
// from the old root.
var ErrOldRootInUse = errors.New("old root still in use")

// FinishRotation drops the old root. Refused while unexpired, unrevoked
// certificates it signed exist, unless force.
func (s *Service) FinishRotation(force bool) error {
	old := s.ca.Rotating()
	if old != nil && !force {
		s.mu.Lock()
		n := s.reg.liveFrom(serialKey(old.SerialNumber), s.now())
		s.mu.Unlock()
		if n > 0 {
			return fmt.Errorf("%w: %d unexpired certificates from the old root (serial %s) would stop verifying; wait until they are renewed or use force", ErrOldRootInUse, n, serialKey(old.SerialNumber))
		}
	}
	if err := s.ca.FinishRotation(); err != nil {
		return err
	}
	return s.afterRotation()
}

func (s *Service) afterRotation() error {
	if err := s.renewServing(); err != nil {
		return err
	}
	if err := s.renewPublisher(); err != nil {
		return err
	}
	return s.publishCRL()
}

// RotationStatus describes the rotation state.
func (s *Service) RotationStatus() RotationResponse {
	r := RotationResponse{Signer: serialKey(s.ca.Signer().SerialNumber), SignerNotAfter: s.ca.Signer().NotAfter, PluggedIn: s.ca.Plugged()}
	if old := s.ca.Rotating(); old != nil {
		r.Rotating, r.Previous = true, serialKey(old.SerialNumber)
		s.mu.Lock()
		r.OldRootCertificates = s.reg.liveFrom(r.Previous, s.now())
		s.mu.Unlock()
	}
	return r
}

// Certificates lists the issued registry, oldest first.
func (s *Service) Certificates() []Certificate {
	now := s.now()
	s.mu.Lock()
	defer s.mu.Unlock()
	entries := s.reg.sortedIssued()
	out := make([]Certificate, len(entries))
	for i, e := range entries {
		st := StateValid
		switch {
		case s.reg.isRevoked(e.Serial):
			st = StateRevoked
		case now.After(e.NotAfter):
			st = StateExpired
		}
		out[i] = Certificate{Serial: serialKey(e.Serial), SPIFFEID: e.ID.String(), NotBefore: e.NotBefore, NotAfter: e.NotAfter, Issuer: e.Issuer, Node: e.Node, State: st}
	}
	return out
}
