// Package ca is the mesh certificate authority: a self-signed ECDSA P-256 root
// generated into its directory on first start, or a plugged-in root (and
// optionally an intermediate that signs) given by files. It signs X.509-SVIDs
// whose only SAN is one SPIFFE ID, and rotates its self-signed root with an
// overlap in which the trust bundle carries the old and the new root.
//
// Files in Config.Dir (self-signed mode):
//
//	root.pem      the trust bundle (every trusted root, PEM); sidecars' --ca-root
//	root-key.pem  the signing root's private key (0600); the root in root.pem whose
//	              public key matches it is the one that signs
//	cross.pem     during a rotation: the new root cross-signed by the old root's key
//
// A rotation writes cross.pem, then root.pem (old+new), then root-key.pem (new),
// each atomically: a crash between them leaves an extra trusted root that
// nothing signs with, which FinishRotation drops. During a rotation every chain
// carries the cross certificate after the leaf, so a peer (or a sidecar's
// --ca-root) that still trusts only the old root verifies certificates from the
// new one: no handshake depends on the new bundle having arrived first. In plugged-in mode root.pem is written
// from the files (so sidecars point --ca-root at the same place) and the given
// key never leaves its file.
//
// Deliberate: with a plugged-in intermediate, the bundle carries the
// intermediate beside the root, so that the CRL (signed by the intermediate,
// whose key is the only one pilot holds) verifies against the bundle
// (revoke.Parse checks a CRL against the bundle's certificates only).
package ca

import (
	"bytes"
	"crypto"
	"crypto/ecdsa"
	"crypto/ed25519"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"fmt"
	"io/fs"
	"math/big"
	"net"
	"net/url"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/spiffe/go-spiffe/v2/spiffeid"

	"github.com/weft-mesh/weft/certs/bundle"
	"github.com/weft-mesh/weft/internal/atomicfile"
)

// File names in Config.Dir.
const (
	RootFile    = "root.pem"
	RootKeyFile = "root-key.pem"
	CrossFile   = "cross.pem"
)

// Defaults and bounds.
const (
	DefaultRootTTL = 10 * 365 * 24 * time.Hour
	// MaxTTL bounds a leaf's lifetime; it equals the bound MeshConfig puts on
	// certificateTTL (resource.MaxCertificateTTL; pilot/ca tests they agree),
	// so every accepted MeshConfig can be honoured.
	MaxTTL = 365 * 24 * time.Hour
	// Backdate is how far a leaf's NotBefore is set before now, for clock skew.
	Backdate = time.Minute
	// MaxDNSNames and MaxIPs bound SignKey's SANs.
	MaxDNSNames = 32
	MaxIPs      = 32
)

// Config of a CA. Keyed literals; Dir and TrustDomain are required.
type Config struct {
	Dir         string // <data-dir>/ca
	TrustDomain string
	// Plugged-in CA: RootCertFile is the trust anchor; ChainFile (optional) is
	// the signing intermediate(s), signer first, up to but not including the root;
	// RootKeyFile is the key of the signer (the first of ChainFile, else the root).
	RootCertFile, RootKeyFile, ChainFile string
	// RootTTL is the validity of a generated root (DefaultRootTTL when 0).
	RootTTL time.Duration
	Now     func() time.Time // time.Now when nil
	Logger  hclog.Logger     // hclog.NewNullLogger() when nil
}

// state is one immutable view of the CA: swapped whole.
type state struct {
	bundle   *bundle.Bundle
	signer   *x509.Certificate   // signs leaves and the CRL
	key      crypto.Signer       // signer's key
	chain    []*x509.Certificate // intermediates carried after a leaf (signer first), empty for a root signer
	previous *x509.Certificate   // during a rotation: the old root; nil otherwise
}

// CA signs SVIDs. Safe for concurrent use; Sign never waits on disk.
type CA struct {
	cfg     Config
	td      spiffeid.TrustDomain
	plugged bool
	log     hclog.Logger
	now     func() time.Time
	st      atomic.Pointer[state]
	rotMu   sync.Mutex // serialises StartRotation/FinishRotation (held across their disk writes, off the signing path)
}

// Open loads the CA from cfg.Dir, or the plugged-in files, creating a
// self-signed root on first start.
func Open(cfg Config) (*CA, error) {
	if cfg.Dir == "" {
		return nil, errors.New("ca: Dir is required")
	}
	td, err := spiffeid.TrustDomainFromString(cfg.TrustDomain)
	if err != nil {
		return nil, fmt.Errorf("ca: trust domain %q: %w", cfg.TrustDomain, err)
	}
	if cfg.RootTTL == 0 {
		cfg.RootTTL = DefaultRootTTL
	}
	if cfg.RootTTL < 0 {
		return nil, fmt.Errorf("ca: RootTTL %v is negative", cfg.RootTTL)
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	if cfg.Logger == nil {
		cfg.Logger = hclog.NewNullLogger()
	}
	c := &CA{cfg: cfg, td: td, log: cfg.Logger, now: cfg.Now}
	if err := os.MkdirAll(cfg.Dir, 0o700); err != nil {
		return nil, fmt.Errorf("ca: %w", err)
	}
	var st *state
	switch {
	case cfg.RootCertFile != "" || cfg.RootKeyFile != "" || cfg.ChainFile != "":
		c.plugged = true
		st, err = loadPlugged(cfg)
		if err == nil {
			err = atomicfile.Write(filepath.Join(cfg.Dir, RootFile), st.bundle.PEM(), 0o644)
		}
	default:
		st, err = c.loadOrCreate()
	}
	if err != nil {
		return nil, err
	}
	c.st.Store(st)
	c.log.Info("certificate authority ready", "trust_domain", td.String(), "plugged_in", c.plugged,
		"signer_serial", fmt.Sprintf("%x", st.signer.SerialNumber), "signer_not_after", st.signer.NotAfter, "roots", len(st.bundle.Roots()))
	return c, nil
}

func (c *CA) loadOrCreate() (*state, error) {
	rootPath := filepath.Join(c.cfg.Dir, RootFile)
	keyPath := filepath.Join(c.cfg.Dir, RootKeyFile)
	pemBytes, err := os.ReadFile(rootPath)
	if errors.Is(err, fs.ErrNotExist) {
		if _, kerr := os.Stat(keyPath); kerr == nil {
			return nil, fmt.Errorf("ca: %s exists without %s: refusing to replace a key", keyPath, rootPath)
		}
		cert, key, err := newRoot(c.td, c.now(), c.cfg.RootTTL)
		if err != nil {
			return nil, err
		}
		b, err := bundle.New(cert)
		if err != nil {
			return nil, fmt.Errorf("ca: %w", err)
		}
		if err := writeKey(keyPath, key); err != nil {
			return nil, err
		}
		if err := atomicfile.Write(rootPath, b.PEM(), 0o644); err != nil {
			return nil, fmt.Errorf("ca: %w", err)
		}
		c.log.Info("generated a self-signed mesh root", "dir", c.cfg.Dir, "not_after", cert.NotAfter)
		return &state{bundle: b, signer: cert, key: key}, nil
	}
	if err != nil {
		return nil, fmt.Errorf("ca: %w", err)
	}
	b, err := bundle.Parse(pemBytes)
	if err != nil {
		return nil, fmt.Errorf("ca: %s: %w", rootPath, err)
	}
	key, err := readKey(keyPath)
	if err != nil {
		return nil, err
	}
	st := &state{bundle: b, key: key}
	for _, r := range b.Roots() {
		if samePublic(r.PublicKey, key.Public()) {
			st.signer = r
		}
	}
	if st.signer == nil {
		return nil, fmt.Errorf("ca: no root in %s matches the key in %s", rootPath, keyPath)
	}
	for _, r := range b.Roots() {
		if r != st.signer {
			st.previous = r // a rotation in progress (the newest other root)
		}
	}
	if st.previous != nil {
		if cross, err := readCerts(filepath.Join(c.cfg.Dir, CrossFile)); err == nil && len(cross) == 1 &&
			samePublic(cross[0].PublicKey, key.Public()) && cross[0].CheckSignatureFrom(st.previous) == nil {
			st.chain = cross
		}
	}
	return st, nil
}

func loadPlugged(cfg Config) (*state, error) {
	if cfg.RootCertFile == "" || cfg.RootKeyFile == "" {
		return nil, errors.New("ca: a plugged-in CA needs both RootCertFile and RootKeyFile")
	}
	roots, err := readCerts(cfg.RootCertFile)
	if err != nil {
		return nil, err
	}
	if len(roots) != 1 {
		return nil, fmt.Errorf("ca: %s: %d certificates, want exactly one root", cfg.RootCertFile, len(roots))
	}
	root := roots[0]
	if err := root.CheckSignatureFrom(root); err != nil {
		return nil, fmt.Errorf("ca: %s: not a self-signed root: %w", cfg.RootCertFile, err)
	}
	var chain []*x509.Certificate
	if cfg.ChainFile != "" {
		if chain, err = readCerts(cfg.ChainFile); err != nil {
			return nil, err
		}
		if len(chain) == 0 || len(chain) > bundle.MaxChain-1 {
			return nil, fmt.Errorf("ca: %s: %d certificates, want 1..%d", cfg.ChainFile, len(chain), bundle.MaxChain-1)
		}
	}
	key, err := readKey(cfg.RootKeyFile)
	if err != nil {
		return nil, err
	}
	signer := root
	if len(chain) > 0 {
		signer = chain[0]
	}
	if !signer.IsCA || signer.KeyUsage&x509.KeyUsageCertSign == 0 {
		return nil, fmt.Errorf("ca: signer %q (serial %x) is not a CA with the certSign key usage", signer.Subject, signer.SerialNumber)
	}
	if !samePublic(signer.PublicKey, key.Public()) {
		return nil, fmt.Errorf("ca: the key in %s is not the key of the signer %q (serial %x)", cfg.RootKeyFile, signer.Subject, signer.SerialNumber)
	}
	if len(chain) > 0 {
		inter := x509.NewCertPool()
		for _, c := range chain[1:] {
			inter.AddCert(c)
		}
		pool := x509.NewCertPool()
		pool.AddCert(root)
		if _, err := signer.Verify(x509.VerifyOptions{Roots: pool, Intermediates: inter, KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageAny}, CurrentTime: signer.NotBefore.Add(time.Second)}); err != nil {
			return nil, fmt.Errorf("ca: %s does not chain to the root in %s: %w", cfg.ChainFile, cfg.RootCertFile, err)
		}
	}
	b, err := bundle.New(append([]*x509.Certificate{root}, chain...)...)
	if err != nil {
		return nil, fmt.Errorf("ca: %w", err)
	}
	return &state{bundle: b, signer: signer, key: key, chain: chain}, nil
}

// Plugged reports whether the CA's keys come from files (no rotation here).
func (c *CA) Plugged() bool { return c.plugged }

// TrustDomain is the CA's trust domain.
func (c *CA) TrustDomain() spiffeid.TrustDomain { return c.td }

// Bundle is the trust bundle: during a rotation the old and the new root.
func (c *CA) Bundle() *bundle.Bundle { return c.st.Load().bundle }

// Signer is the certificate that signs leaves and the CRL now.
func (c *CA) Signer() *x509.Certificate { return c.st.Load().signer }

// Rotating returns the old root while a rotation is in progress, else nil.
func (c *CA) Rotating() *x509.Certificate { return c.st.Load().previous }

// CRLSigner is the certificate and key the CRL is signed with (the signer).
func (c *CA) CRLSigner() (*x509.Certificate, crypto.Signer) {
	st := c.st.Load()
	return st.signer, st.key
}

// Sign issues an X.509-SVID for csr: csr's signature must verify, its key be
// ECDSA P-256, its only SAN one URI equal to id (no DNS, IP or e-mail SANs);
// ttl in (0, MaxTTL]. Returns leaf, then intermediates (not the root).
func (c *CA) Sign(csr *x509.CertificateRequest, id spiffeid.ID, ttl time.Duration) ([]*x509.Certificate, error) {
	if csr == nil {
		return nil, errors.New("sign: no CSR")
	}
	if err := csr.CheckSignature(); err != nil {
		return nil, fmt.Errorf("sign %s: CSR signature: %w", id, err)
	}
	if err := CheckCSR(csr, id); err != nil {
		return nil, err
	}
	pub, ok := csr.PublicKey.(*ecdsa.PublicKey)
	if !ok || pub.Curve != elliptic.P256() {
		return nil, fmt.Errorf("sign %s: CSR key is %T, want ECDSA P-256", id, csr.PublicKey)
	}
	return c.sign(pub, id, nil, nil, ttl)
}

// CheckCSR checks that csr's only SAN is one URI equal to id. It does not
// check the signature (Sign does).
func CheckCSR(csr *x509.CertificateRequest, id spiffeid.ID) error {
	switch {
	case len(csr.DNSNames) > 0:
		return fmt.Errorf("sign %s: CSR has DNS SANs %q; an SVID carries only its URI SAN", id, csr.DNSNames)
	case len(csr.IPAddresses) > 0:
		return fmt.Errorf("sign %s: CSR has IP SANs %v; an SVID carries only its URI SAN", id, csr.IPAddresses)
	case len(csr.EmailAddresses) > 0:
		return fmt.Errorf("sign %s: CSR has e-mail SANs %q; an SVID carries only its URI SAN", id, csr.EmailAddresses)
	case len(csr.URIs) != 1:
		return fmt.Errorf("sign %s: CSR has %d URI SANs, want exactly one", id, len(csr.URIs))
	}
	got, err := spiffeid.FromURI(csr.URIs[0])
	if err != nil {
		return fmt.Errorf("sign %s: CSR URI SAN %q: %w", id, csr.URIs[0], err)
	}
	if got != id {
		return fmt.Errorf("sign: CSR asks for SPIFFE ID %s, the credential grants %s", got, id)
	}
	return nil
}

// SignKey issues a certificate for pub (ECDSA P-256 or Ed25519) with id as its
// URI SAN and the given DNS/IP SANs (pilot's serving cert, the publisher cert).
func (c *CA) SignKey(pub crypto.PublicKey, id spiffeid.ID, dns []string, ips []net.IP, ttl time.Duration) ([]*x509.Certificate, error) {
	switch k := pub.(type) {
	case *ecdsa.PublicKey:
		if k.Curve != elliptic.P256() {
			return nil, fmt.Errorf("sign %s: ECDSA key on %s, want P-256", id, k.Curve.Params().Name)
		}
	case ed25519.PublicKey:
	default:
		return nil, fmt.Errorf("sign %s: key is %T, want ECDSA P-256 or Ed25519", id, pub)
	}
	if len(dns) > MaxDNSNames || len(ips) > MaxIPs {
		return nil, fmt.Errorf("sign %s: %d DNS and %d IP SANs, over the bounds of %d and %d", id, len(dns), len(ips), MaxDNSNames, MaxIPs)
	}
	return c.sign(pub, id, dns, ips, ttl)
}

func (c *CA) sign(pub crypto.PublicKey, id spiffeid.ID, dns []string, ips []net.IP, ttl time.Duration) ([]*x509.Certificate, error) {
	if id.IsZero() {
		return nil, errors.New("sign: zero SPIFFE ID")
	}
	if id.TrustDomain() != c.td {
		return nil, fmt.Errorf("sign %s: trust domain %s, this CA signs for %s", id, id.TrustDomain(), c.td)
	}
	if ttl <= 0 || ttl > MaxTTL {
		return nil, fmt.Errorf("sign %s: ttl %v not in (0, %v]", id, ttl, MaxTTL)
	}
	st := c.st.Load()
	now := c.now()
	notAfter := now.Add(ttl)
	if notAfter.After(st.signer.NotAfter) {
		notAfter = st.signer.NotAfter // a leaf cannot outlive its issuer
	}
	if !notAfter.After(now) {
		return nil, fmt.Errorf("sign %s: the signer (serial %x) expired at %v", id, st.signer.SerialNumber, st.signer.NotAfter)
	}
	serial, err := Serial()
	if err != nil {
		return nil, err
	}
	tmpl := &x509.Certificate{
		SerialNumber:          serial,
		NotBefore:             now.Add(-Backdate),
		NotAfter:              notAfter,
		URIs:                  []*url.URL{id.URL()},
		DNSNames:              dns,
		IPAddresses:           ips,
		KeyUsage:              x509.KeyUsageDigitalSignature,
		ExtKeyUsage:           []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth},
		BasicConstraintsValid: true,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, st.signer, pub, st.key)
	if err != nil {
		return nil, fmt.Errorf("sign %s: %w", id, err)
	}
	leaf, err := x509.ParseCertificate(der)
	if err != nil {
		return nil, fmt.Errorf("sign %s: %w", id, err)
	}
	return append([]*x509.Certificate{leaf}, st.chain...), nil
}

// Serial is a random positive 128-bit serial number.
func Serial() (*big.Int, error) {
	limit := new(big.Int).Lsh(big.NewInt(1), 128)
	for {
		n, err := rand.Int(rand.Reader, limit)
		if err != nil {
			return nil, fmt.Errorf("serial: %w", err)
		}
		if n.Sign() > 0 {
			return n, nil
		}
	}
}

// StartRotation generates a new root that signs from now on; the bundle holds
// the old and the new until FinishRotation. Refused for a plugged-in CA and
// while a rotation is in progress.
func (c *CA) StartRotation() error {
	if c.plugged {
		return errors.New("ca: start rotation: a plugged-in CA rotates by replacing its files")
	}
	c.rotMu.Lock()
	defer c.rotMu.Unlock()
	old := c.st.Load()
	if old.previous != nil {
		return fmt.Errorf("ca: start rotation: already rotating (old root serial %x); finish it first", old.previous.SerialNumber)
	}
	cert, key, err := newRoot(c.td, c.now(), c.cfg.RootTTL)
	if err != nil {
		return err
	}
	b, err := bundle.New(old.signer, cert)
	if err != nil {
		return fmt.Errorf("ca: start rotation: %w", err)
	}
	var chain []*x509.Certificate
	if cross, err := crossSign(cert, old.signer, old.key); err != nil {
		return fmt.Errorf("ca: start rotation: %w", err)
	} else if cross != nil {
		if err := atomicfile.Write(filepath.Join(c.cfg.Dir, CrossFile), EncodeChain([]*x509.Certificate{cross}), 0o644); err != nil {
			return fmt.Errorf("ca: start rotation: %w", err)
		}
		chain = []*x509.Certificate{cross}
	} else {
		c.log.Warn("the old root allows no intermediate (path length 0): certificates from the new root verify only where the new bundle has arrived")
	}
	// Trust first, then sign: a crash between leaves an unused trusted root.
	if err := atomicfile.Write(filepath.Join(c.cfg.Dir, RootFile), b.PEM(), 0o644); err != nil {
		return fmt.Errorf("ca: start rotation: %w", err)
	}
	if err := writeKey(filepath.Join(c.cfg.Dir, RootKeyFile), key); err != nil {
		return fmt.Errorf("ca: start rotation: %w", err)
	}
	c.st.Store(&state{bundle: b, signer: cert, key: key, previous: old.signer, chain: chain})
	c.log.Info("root rotation started", "old_serial", fmt.Sprintf("%x", old.signer.SerialNumber), "new_serial", fmt.Sprintf("%x", cert.SerialNumber))
	return nil
}

// FinishRotation drops every root but the signer from the bundle. Refused when
// no rotation is in progress. Whether certificates from the old root are still
// live is the caller's to check (pilot's registry knows).
func (c *CA) FinishRotation() error {
	if c.plugged {
		return errors.New("ca: finish rotation: a plugged-in CA rotates by replacing its files")
	}
	c.rotMu.Lock()
	defer c.rotMu.Unlock()
	old := c.st.Load()
	if len(old.bundle.Roots()) == 1 {
		return errors.New("ca: finish rotation: no rotation in progress")
	}
	b, err := bundle.New(old.signer)
	if err != nil {
		return fmt.Errorf("ca: finish rotation: %w", err)
	}
	if err := atomicfile.Write(filepath.Join(c.cfg.Dir, RootFile), b.PEM(), 0o644); err != nil {
		return fmt.Errorf("ca: finish rotation: %w", err)
	}
	if err := os.Remove(filepath.Join(c.cfg.Dir, CrossFile)); err != nil && !errors.Is(err, fs.ErrNotExist) {
		c.log.Warn("removing the cross certificate", "error", err) // unused once the bundle has one root
	}
	c.st.Store(&state{bundle: b, signer: old.signer, key: old.key})
	c.log.Info("root rotation finished", "root_serial", fmt.Sprintf("%x", old.signer.SerialNumber))
	return nil
}

func newRoot(td spiffeid.TrustDomain, now time.Time, ttl time.Duration) (*x509.Certificate, *ecdsa.PrivateKey, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, nil, fmt.Errorf("ca: root key: %w", err)
	}
	serial, err := Serial()
	if err != nil {
		return nil, nil, err
	}
	tmpl := &x509.Certificate{
		SerialNumber:          serial,
		Subject:               pkix.Name{Organization: []string{"weft"}, CommonName: "weft mesh root " + td.String() + " " + now.UTC().Format("20060102T150405Z")},
		NotBefore:             now.Add(-Backdate),
		NotAfter:              now.Add(ttl),
		IsCA:                  true,
		BasicConstraintsValid: true,
		// One intermediate below: the next root, cross-signed during a rotation.
		MaxPathLen: 1,
		KeyUsage:   x509.KeyUsageCertSign | x509.KeyUsageCRLSign | x509.KeyUsageDigitalSignature,
		URIs:       []*url.URL{spiffeid.RequireFromPath(td, "").URL()},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		return nil, nil, fmt.Errorf("ca: root: %w", err)
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		return nil, nil, fmt.Errorf("ca: root: %w", err)
	}
	return cert, key, nil
}

// crossSign issues next (a new root) as an intermediate of old: same subject,
// key and key ID, signing leaves only. nil when old allows no intermediate.
func crossSign(next, old *x509.Certificate, oldKey crypto.Signer) (*x509.Certificate, error) {
	if old.MaxPathLenZero || (old.MaxPathLen == 0 && old.BasicConstraintsValid) {
		return nil, nil
	}
	serial, err := Serial()
	if err != nil {
		return nil, err
	}
	notAfter := next.NotAfter
	if notAfter.After(old.NotAfter) {
		notAfter = old.NotAfter
	}
	tmpl := &x509.Certificate{
		SerialNumber:          serial,
		Subject:               next.Subject,
		NotBefore:             next.NotBefore,
		NotAfter:              notAfter,
		IsCA:                  true,
		BasicConstraintsValid: true,
		MaxPathLenZero:        true,
		KeyUsage:              next.KeyUsage,
		SubjectKeyId:          next.SubjectKeyId,
		URIs:                  next.URIs,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, old, next.PublicKey, oldKey)
	if err != nil {
		return nil, fmt.Errorf("cross-sign the new root: %w", err)
	}
	return x509.ParseCertificate(der)
}

func writeKey(path string, key crypto.Signer) error {
	der, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		return fmt.Errorf("ca: key: %w", err)
	}
	return atomicfile.Write(path, pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: der}), 0o600)
}

// readKey reads a PKCS#8, SEC1 (EC) or PKCS#1 private key PEM.
func readKey(path string) (crypto.Signer, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("ca: key: %w", err)
	}
	blk, _ := pem.Decode(b)
	if blk == nil {
		return nil, fmt.Errorf("ca: key %s: no PEM block", path)
	}
	var k any
	switch blk.Type {
	case "PRIVATE KEY":
		k, err = x509.ParsePKCS8PrivateKey(blk.Bytes)
	case "EC PRIVATE KEY":
		k, err = x509.ParseECPrivateKey(blk.Bytes)
	case "RSA PRIVATE KEY":
		k, err = x509.ParsePKCS1PrivateKey(blk.Bytes)
	default:
		return nil, fmt.Errorf("ca: key %s: PEM type %q is not a private key", path, blk.Type)
	}
	if err != nil {
		return nil, fmt.Errorf("ca: key %s: %w", path, err)
	}
	s, ok := k.(crypto.Signer)
	if !ok {
		return nil, fmt.Errorf("ca: key %s: %T cannot sign", path, k)
	}
	return s, nil
}

func readCerts(path string) ([]*x509.Certificate, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("ca: %w", err)
	}
	var out []*x509.Certificate
	for {
		var blk *pem.Block
		blk, b = pem.Decode(b)
		if blk == nil {
			break
		}
		if blk.Type != "CERTIFICATE" {
			continue
		}
		c, err := x509.ParseCertificate(blk.Bytes)
		if err != nil {
			return nil, fmt.Errorf("ca: %s: certificate %d: %w", path, len(out), err)
		}
		out = append(out, c)
	}
	return out, nil
}

func samePublic(a, b crypto.PublicKey) bool {
	type eq interface{ Equal(crypto.PublicKey) bool }
	ea, ok := a.(eq)
	return ok && ea.Equal(b)
}

// EncodeChain is certs as PEM CERTIFICATE blocks, in order.
func EncodeChain(certs []*x509.Certificate) []byte {
	var buf bytes.Buffer
	for _, c := range certs {
		_ = pem.Encode(&buf, &pem.Block{Type: "CERTIFICATE", Bytes: c.Raw})
	}
	return buf.Bytes()
}
