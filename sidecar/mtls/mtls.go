// Package mtls is the sidecar's mutual TLS between sidecars: TLS 1.3 only, both
// sides present the workload X.509-SVID (sidecar/svid) and verify the other's
// against the active configuration's Trust (trust bundle + CRL, SDS secret
// ROOTCA).
//
// Verification is ours, in tls.Config.VerifyConnection, which crypto/tls also
// runs for resumed sessions: the chain against the bundle with go-spiffe's SVID
// rules, the leaf's serial against the CRL on every handshake, the CRL's
// freshness (past NextUpdate + grace no new handshake is made or accepted), and
// on the client side the server's SPIFFE ID against the IDs the destination
// cluster runs as. Past this sidecar's own NotAfter nothing is made or accepted:
// never a fallback to plaintext.
//
// Handshakes are paid per pooled connection: clients keep a session cache (keyed
// by the peer's address, so endpoints of one cluster do not evict each other's
// tickets) and servers issue tickets. Live connections are registered by peer
// serial: new trust material (SetTrust) closes those whose peer the new CRL
// revokes or the new bundle no longer anchors, and Sweep closes those whose
// peer's or own certificate has expired.
//
// Pools retire their client connections before that: a connection records the
// generation of this sidecar's own certificate it was made with and when its
// peer's certificate gets old (RetireAt), and a pool hands out no connection of
// an older generation or past that point, letting the requests on it finish
// (see sidecar/cluster). Renewals then never cut a request.
//
// The principal of a connection for authorization is PeerID(conn) (or
// (*Conn).Peer): the SPIFFE ID verified here, never anything the peer sent in a
// header.
package mtls

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/binary"
	"errors"
	"fmt"
	"net"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/spiffe/go-spiffe/v2/spiffeid"
	"github.com/spiffe/go-spiffe/v2/svid/x509svid"

	"github.com/weft-mesh/weft/certs/revoke"
	"github.com/weft-mesh/weft/sidecar/svid"
)

// ALPN protocols.
const (
	ALPNH2    = "h2"
	ALPNHTTP1 = "http/1.1"
)

// Defaults and bounds of Config.
const (
	DefaultHandshakeTimeout = 10 * time.Second
	MaxHandshakeTimeout     = time.Minute
	DefaultSessionCacheSize = 1024
	MaxSessionCacheSize     = 1 << 16
	// MaxCRLGrace bounds Config.CRLGrace: a day past NextUpdate is already a
	// revocation list nobody maintains.
	MaxCRLGrace = 24 * time.Hour
)

// Config of a Manager; checked by New.
type Config struct {
	SVID   *svid.Holder // required: the workload certificate, read on every handshake
	Logger hclog.Logger // required
	// Now is the clock; nil is time.Now. Tests pass a fake to cross NotAfter and
	// NextUpdate.
	Now func() time.Time
	// CRLGrace is how long past its NextUpdate a CRL is still used (Lapsed);
	// after it new handshakes are refused. 0 is revoke.DefaultGrace; at most
	// MaxCRLGrace; negative is refused.
	CRLGrace time.Duration
	// HandshakeTimeout bounds one handshake (either side). 0 is
	// DefaultHandshakeTimeout; at most MaxHandshakeTimeout.
	HandshakeTimeout time.Duration
	// SessionCacheSize is the client session cache's capacity (one ticket per
	// peer address). 0 is DefaultSessionCacheSize; at most MaxSessionCacheSize.
	SessionCacheSize int
}

// Sides of a handshake (the side label).
const (
	SideServer = "server"
	SideClient = "client"
)

// Manager makes and accepts mTLS connections and tracks the live ones. Safe for
// concurrent use.
type Manager struct {
	cfg      Config
	log      hclog.Logger
	server   *tls.Config
	sessions tls.ClientSessionCache

	trust  atomic.Pointer[trustState] // set by SetTrust (the runtime's activation)
	counts [2][len(results)]atomic.Uint64
	// Refusals are logged at most once per LogEvery per side and result, with
	// the number left unlogged since: a peer retrying in a loop cannot flood
	// the log. lastLog is unix nanoseconds; logged counts what was.
	lastLog [2][len(results)]atomic.Int64
	logged  [2][len(results)]atomic.Uint64

	plainAccepted   atomic.Uint64 // PERMISSIVE plaintext connections (listener counts)
	plainRefused    atomic.Uint64 // STRICT plaintext connections closed (listener counts)
	closedRevoked   atomic.Uint64 // live connections closed by SetTrust: peer revoked
	closedUntrusted atomic.Uint64 // live connections closed by SetTrust: peer's root left the bundle
	closedExpired   atomic.Uint64 // live connections closed by Sweep
	retired         atomic.Uint64 // live server connections Sweep asked to drain (OnRetire)

	mu   sync.Mutex                    // guards live; never held across I/O (Close runs outside)
	live map[string]map[*Conn]struct{} // by peer serial (hex)
}

type trustState struct {
	t      *Trust
	needed bool // the active configuration has TLS chains or TLS clusters
}

// New checks cfg.
func New(cfg Config) (*Manager, error) {
	switch {
	case cfg.SVID == nil:
		return nil, errors.New("mtls: SVID holder is required")
	case cfg.Logger == nil:
		return nil, errors.New("mtls: Logger is required")
	case cfg.CRLGrace < 0 || cfg.CRLGrace > MaxCRLGrace:
		return nil, fmt.Errorf("mtls: CRLGrace %s outside 0..%s", cfg.CRLGrace, MaxCRLGrace)
	case cfg.HandshakeTimeout < 0 || cfg.HandshakeTimeout > MaxHandshakeTimeout:
		return nil, fmt.Errorf("mtls: HandshakeTimeout %s outside 0..%s", cfg.HandshakeTimeout, MaxHandshakeTimeout)
	case cfg.SessionCacheSize < 0 || cfg.SessionCacheSize > MaxSessionCacheSize:
		return nil, fmt.Errorf("mtls: SessionCacheSize %d outside 0..%d", cfg.SessionCacheSize, MaxSessionCacheSize)
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	if cfg.CRLGrace == 0 {
		cfg.CRLGrace = revoke.DefaultGrace
	}
	if cfg.HandshakeTimeout == 0 {
		cfg.HandshakeTimeout = DefaultHandshakeTimeout
	}
	if cfg.SessionCacheSize == 0 {
		cfg.SessionCacheSize = DefaultSessionCacheSize
	}
	m := &Manager{cfg: cfg, log: cfg.Logger, sessions: tls.NewLRUClientSessionCache(cfg.SessionCacheSize),
		live: make(map[string]map[*Conn]struct{})}
	m.server = &tls.Config{
		MinVersion: tls.VersionTLS13,
		MaxVersion: tls.VersionTLS13,
		Time:       cfg.Now, // ticket and certificate ages on the same clock as ours
		// Any certificate is requested and required; VerifyConnection decides.
		ClientAuth:       tls.RequireAnyClientCert,
		GetCertificate:   m.ownCertificate,
		NextProtos:       []string{ALPNH2, ALPNHTTP1},
		VerifyConnection: func(cs tls.ConnectionState) error { _, err := m.verifyState(cs, nil); return err },
		// Session tickets are on (crypto/tls rotates their keys): a client
		// sidecar resumes instead of paying a full handshake per connection.
	}
	return m, nil
}

// SetTrust installs the trust material of the configuration just activated
// (nil: it has none) and whether that configuration needs mTLS, then closes
// (fails closed) every live connection whose peer the new CRL revokes and,
// when the bundle's roots changed, every one whose peer's chain the new bundle
// would not have accepted at its handshake (its root was dropped). The runtime
// calls it on every activation, last-known-good included.
func (m *Manager) SetTrust(t *Trust, needed bool) {
	prev := m.trust.Swap(&trustState{t: t, needed: needed})
	if t == nil {
		return
	}
	rootsChanged := prev == nil || prev.t == nil || !prev.t.bundle.Equal(t.bundle)
	// One connection per peer serial stands for all of them: every connection
	// of one serial shares the verdict. Verified off the lock (a chain
	// verification per serial would hold up every handshake's registration).
	var reps []*Conn
	m.mu.Lock()
	for _, conns := range m.live {
		for c := range conns {
			reps = append(reps, c)
			break
		}
	}
	m.mu.Unlock()
	type verdict struct {
		key, reason string
		err         error
	}
	var doomed []verdict
	for _, c := range reps {
		if reason, err := condemned(c, t, rootsChanged); reason != "" {
			doomed = append(doomed, verdict{key: c.key, reason: reason, err: err})
		}
	}
	if len(doomed) == 0 {
		return
	}
	type closing struct {
		c *Conn
		verdict
	}
	var close []closing
	m.mu.Lock()
	for _, d := range doomed {
		for c := range m.live[d.key] {
			close = append(close, closing{c, d})
		}
	}
	m.mu.Unlock()
	for _, x := range close {
		m.closeCondemned(x.c, t, x.reason, x.err)
	}
}

// condemned says why trust t fails the live connection c closed ("" when it
// does not): its peer's certificate is revoked, or (when the roots changed)
// the bundle would not have accepted its peer's chain at its handshake.
func condemned(c *Conn, t *Trust, rootsChanged bool) (string, error) {
	if t.crl.Revoked(c.peer.Serial) {
		return closeRevoked, nil
	}
	if rootsChanged {
		if _, err := t.bundle.Verify(c.chain, c.at); err != nil {
			return closeUntrusted, err
		}
	}
	return "", nil
}

// closeResult is the handshake result of a close reason.
func closeResult(reason string) string {
	if reason == closeRevoked {
		return ResultRevoked
	}
	return ResultUntrusted
}

// closeCondemned closes c for reason (condemned), logged and counted.
func (m *Manager) closeCondemned(c *Conn, t *Trust, reason string, err error) {
	if reason == closeRevoked {
		m.log.Warn("closing a connection: peer certificate revoked", "peer", c.peer.ID, "serial", c.key,
			"crl", t.crl.Number(), "remote", c.RemoteAddr())
		m.closedRevoked.Add(1)
	} else {
		m.log.Warn("closing a connection: the new trust bundle does not anchor the peer's chain", "peer", c.peer.ID,
			"serial", c.key, "error", err, "remote", c.RemoteAddr())
		m.closedUntrusted.Add(1)
	}
	c.Close()
}

// Reasons a live connection is closed (the reason label of
// weft_sidecar_mtls_connections_closed_total).
const (
	closeRevoked   = "revoked"
	closeUntrusted = "untrusted"
)

// OwnGeneration is the current generation of this sidecar's own certificate
// (svid.Holder.Generation): one atomic load, for pools to compare on every Get.
func (m *Manager) OwnGeneration() uint64 { return m.cfg.SVID.Generation() }

// Trust returns the trust material in use (nil: none).
func (m *Manager) Trust() *Trust {
	if s := m.trust.Load(); s != nil {
		return s.t
	}
	return nil
}

// Sweep closes live connections that must not go on at now: every one once this
// sidecar's own certificate has expired (mTLS to and from it stops), and those
// whose peer's certificate has; and it runs the OnRetire drain of those that got
// old. The owner calls it on its staleness tick.
func (m *Manager) Sweep(now time.Time) {
	ownErr := checkOwn(m.cfg.SVID.Load(), now)
	gen := m.OwnGeneration()
	var close, retire []*Conn
	m.mu.Lock()
	for _, conns := range m.live {
		for c := range conns {
			switch {
			case ownErr != nil || now.After(c.peer.NotAfter):
				close = append(close, c)
			case c.onRetire.Load() != nil && !c.retireFired.Load() && (c.ownGen != gen || !now.Before(c.retireAt)):
				retire = append(retire, c)
			}
		}
	}
	m.mu.Unlock()
	for _, c := range retire {
		if c.retireFired.CompareAndSwap(false, true) {
			m.retired.Add(1)
			go (*c.onRetire.Load())()
		}
	}
	for _, c := range close {
		why := "peer certificate expired"
		if ownErr != nil {
			why = ownErr.Error()
		}
		m.log.Warn("closing a connection", "reason", why, "peer", c.peer.ID, "serial", c.key, "remote", c.RemoteAddr())
		m.closedExpired.Add(1)
		c.Close()
	}
}

func (m *Manager) trustNow() *Trust {
	if s := m.trust.Load(); s != nil {
		return s.t
	}
	return nil
}

// ownCertificate serves the current SVID, refusing one that is not valid now: a
// handshake must fail rather than present an expired certificate.
func (m *Manager) ownCertificate(*tls.ClientHelloInfo) (*tls.Certificate, error) {
	s := m.cfg.SVID.Load()
	if err := checkOwn(s, m.cfg.Now()); err != nil {
		return nil, err
	}
	return &s.Cert, nil
}

func (m *Manager) ownClientCertificate(*tls.CertificateRequestInfo) (*tls.Certificate, error) {
	return m.ownCertificate(nil)
}

// verifyState runs verify on a handshake's state (full or resumed).
func (m *Manager) verifyState(cs tls.ConnectionState, expected []spiffeid.ID) (Peer, error) {
	if cs.Version != tls.VersionTLS13 {
		return Peer{}, refused(ResultError, "TLS version %x, only TLS 1.3 is accepted", cs.Version)
	}
	return verify(m.cfg.SVID.Load(), m.trustNow(), cs.PeerCertificates, m.cfg.Now(), m.cfg.CRLGrace, expected)
}

// precheck refuses before any byte is sent when the handshake cannot succeed
// on this sidecar's account (own certificate, trust, CRL freshness).
func (m *Manager) precheck(now time.Time) error {
	if err := checkOwn(m.cfg.SVID.Load(), now); err != nil {
		return err
	}
	return checkTrust(m.trustNow(), now, m.cfg.CRLGrace)
}

// Server runs the server side of the handshake on raw (whose first byte is a TLS
// record) and returns the verified connection, registered until it closes. On
// failure raw is closed.
func (m *Manager) Server(ctx context.Context, raw net.Conn) (*Conn, error) {
	if err := m.precheck(m.cfg.Now()); err != nil {
		m.count(SideServer, err, false)
		raw.Close()
		return nil, err
	}
	tc := tls.Server(raw, m.server)
	return m.handshake(ctx, SideServer, tc, nil, m.OwnGeneration())
}

// Upstream is what a client needs to know of its destination: the SNI to send,
// the SPIFFE IDs the destination runs as (pilot's match_typed_subject_alt_names),
// and the ALPN protocols to offer. Immutable; built at configuration compile.
type Upstream struct {
	SNI  string
	IDs  []spiffeid.ID // the server must be one of them; at least one
	ALPN []string      // [h2] for the HTTP peer hop; none for TCP
	key  string        // pool key prefix: connections verified for the same IDs are interchangeable
}

// NewUpstream checks and builds an Upstream.
func NewUpstream(sni string, ids []spiffeid.ID, alpn []string) (*Upstream, error) {
	if len(ids) == 0 {
		return nil, errors.New("mtls upstream: no expected SPIFFE ID (every server would be refused)")
	}
	for i, id := range ids {
		if id.IsZero() {
			return nil, fmt.Errorf("mtls upstream: expected SPIFFE ID %d is empty", i)
		}
	}
	key := "tls"
	for _, id := range ids {
		key += " " + id.String()
	}
	for _, p := range alpn {
		key += " alpn=" + p
	}
	return &Upstream{SNI: sni, IDs: ids, ALPN: alpn, key: key}, nil
}

// Key identifies the verification this upstream does: connections made for two
// upstreams with the same key may be pooled together.
func (u *Upstream) Key() string { return u.key }

// Client runs the client side of the handshake on raw, a fresh connection to
// addr, for u, and returns the verified connection. On failure raw is closed.
func (m *Manager) Client(ctx context.Context, raw net.Conn, addr string, u *Upstream) (*Conn, error) {
	if u == nil {
		raw.Close()
		return nil, errors.New("mtls: client handshake without an upstream")
	}
	// Before the handshake loads the certificate to present: the generation
	// recorded is never newer than the certificate sent (svid.Holder).
	gen := m.cfg.SVID.Generation()
	if err := m.precheck(m.cfg.Now()); err != nil {
		m.count(SideClient, err, false)
		raw.Close()
		return nil, err
	}
	sc := &sessionCache{inner: m.sessions, addr: addr + "|" + ownSerial(m.cfg.SVID.Load()), now: m.cfg.Now}
	cfg := &tls.Config{
		MinVersion: tls.VersionTLS13,
		MaxVersion: tls.VersionTLS13,
		ServerName: u.SNI,
		Time:       m.cfg.Now,
		// crypto/tls would check a DNS name against the SNI; a SPIFFE SVID has
		// none. VerifyConnection does all of it: bundle, CRL, expected IDs.
		InsecureSkipVerify:   true,
		GetClientCertificate: m.ownClientCertificate,
		NextProtos:           u.ALPN,
		ClientSessionCache:   sc,
		VerifyConnection:     func(cs tls.ConnectionState) error { _, err := m.verifyState(cs, u.IDs); return err },
	}
	c, err := m.handshake(ctx, SideClient, tls.Client(raw, cfg), u.IDs, gen)
	if err != nil {
		// A session that failed here is not offered again (a server that lost
		// its ticket keys would refuse it on every retry until it expired):
		// the next handshake is a full one.
		key := u.SNI
		if key == "" {
			key = raw.RemoteAddr().String() // crypto/tls's key without a ServerName
		}
		cfg.ClientSessionCache.Put(key, nil)
		return nil, err
	}
	// Tickets arrive after the handshake, on the connection's first reads.
	sc.peer.Store(c.chain[0])
	return c, nil
}

// handshake runs tc's handshake and registers the verified connection; gen is
// the own certificate generation a client connection is made with.
func (m *Manager) handshake(ctx context.Context, side string, tc *tls.Conn, expected []spiffeid.ID, gen uint64) (*Conn, error) {
	before := m.trust.Load()
	hctx, cancel := context.WithTimeout(ctx, m.cfg.HandshakeTimeout)
	err := tc.HandshakeContext(hctx)
	cancel()
	if err != nil {
		m.count(side, err, false)
		tc.Close()
		return nil, fmt.Errorf("mtls %s handshake with %s: %w", side, tc.RemoteAddr(), err)
	}
	cs := tc.ConnectionState()
	// VerifyConnection ran the whole check on this very state and accepted it:
	// only read the peer off it (verifying the chain again would double the
	// handshake's signature checks).
	p, err := peerOf(cs)
	if err != nil {
		m.count(side, err, false)
		tc.Close()
		return nil, fmt.Errorf("mtls %s handshake with %s: %w", side, tc.RemoteAddr(), err)
	}
	m.count(side, nil, cs.DidResume)
	c := &Conn{Conn: tc, peer: p, m: m, key: p.Serial.Text(16), alpn: cs.NegotiatedProtocol, resumed: cs.DidResume,
		chain: cs.PeerCertificates, at: m.cfg.Now()}
	c.ownGen, c.retireAt = gen, RetireAt(p.NotBefore, p.NotAfter, c.at)
	m.mu.Lock()
	set := m.live[c.key]
	if set == nil {
		set = make(map[*Conn]struct{})
		m.live[c.key] = set
	}
	set[c] = struct{}{}
	m.mu.Unlock()
	// New trust material during the handshake: its SetTrust may have looked at
	// the live connections before this one was registered, so this one is
	// checked against it here (after registering, so one of the two sees it).
	if ts := m.trust.Load(); ts != before && ts != nil && ts.t != nil {
		if reason, err := condemned(c, ts.t, true); reason != "" {
			m.closeCondemned(c, ts.t, reason, err)
			return nil, fmt.Errorf("mtls %s handshake with %s: %w", side, tc.RemoteAddr(),
				refused(closeResult(reason), "the trust material activated during the handshake fails it (%s)", reason))
		}
	}
	return c, nil
}

// LogEvery is the most often one kind of refusal (side and result) is logged.
const LogEvery = time.Second

// peerOf reads the verified peer of an accepted handshake.
func peerOf(cs tls.ConnectionState) (Peer, error) {
	if len(cs.PeerCertificates) == 0 {
		return Peer{}, refused(ResultUntrusted, "the peer presented no certificate")
	}
	leaf := cs.PeerCertificates[0]
	id, err := x509svid.IDFromCert(leaf)
	if err != nil {
		return Peer{}, refused(ResultUntrusted, "peer certificate serial %x: %v", leaf.SerialNumber, err)
	}
	return Peer{ID: id, Serial: leaf.SerialNumber, NotBefore: leaf.NotBefore, NotAfter: leaf.NotAfter}, nil
}

func (m *Manager) count(side string, err error, resumed bool) {
	s := 0
	if side == SideClient {
		s = 1
	}
	r := ResultOK
	var re *RefusedError
	switch {
	case err == nil && resumed:
		r = ResultResumed
	case err == nil:
	case errors.As(err, &re):
		r = re.Result
	default:
		r = ResultError
	}
	i := resultIndex(r)
	n := m.counts[s][i].Add(1)
	if err == nil {
		return
	}
	now := m.cfg.Now().UnixNano()
	last := m.lastLog[s][i].Load()
	if now-last < int64(LogEvery) || !m.lastLog[s][i].CompareAndSwap(last, now) {
		return
	}
	prev := m.logged[s][i].Swap(n)
	m.log.Warn("mTLS handshake refused", "side", side, "result", r, "error", err, "unlogged_since_last", n-prev-1)
}

func (m *Manager) forget(c *Conn) {
	m.mu.Lock()
	if set := m.live[c.key]; set != nil {
		delete(set, c)
		if len(set) == 0 {
			delete(m.live, c.key)
		}
	}
	m.mu.Unlock()
}

// Live reports open mTLS connections (both sides).
func (m *Manager) Live() int {
	m.mu.Lock()
	defer m.mu.Unlock()
	n := 0
	for _, s := range m.live {
		n += len(s)
	}
	return n
}

// CountPlaintextAccepted counts a plaintext connection a PERMISSIVE chain took.
func (m *Manager) CountPlaintextAccepted() { m.plainAccepted.Add(1) }

// CountPlaintextRefused counts a plaintext connection closed because its port
// accepts only mTLS (STRICT).
func (m *Manager) CountPlaintextRefused() { m.plainRefused.Add(1) }

// sessionCache is one client handshake's view of the shared session cache. It
// keys tickets by the peer's address and this sidecar's certificate serial as
// well: the SNI (the cluster name) is the same for every endpoint of a
// cluster, and each endpoint's tickets are its own; and a ticket carries the
// client certificate it was issued for, so after a renewal the old one (maybe
// revoked since) is never offered again. It also tags each ticket with the
// validity of the peer certificate it carries (peer, set once the handshake is
// done; tickets come after) and offers none past its retire point, so a peer's
// renewal reaches the client (see resumable).
type sessionCache struct {
	inner tls.ClientSessionCache
	addr  string
	now   func() time.Time
	peer  atomic.Pointer[x509.Certificate]
}

func ownSerial(s *svid.SVID) string {
	if s == nil || s.Cert.Leaf == nil {
		return ""
	}
	return s.Cert.Leaf.SerialNumber.Text(16)
}

// peerTag prefixes the SessionState.Extra entry with the peer certificate's
// NotBefore and NotAfter (unix seconds, big endian).
const peerTag = "weft-mtls-peer/1:"

func (a *sessionCache) Get(key string) (*tls.ClientSessionState, bool) {
	cs, ok := a.inner.Get(a.addr + "|" + key)
	if !ok || cs == nil {
		return cs, ok
	}
	if nb, na, tagged := peerValidity(cs); !tagged || !resumable(nb, na, a.now()) {
		a.inner.Put(a.addr+"|"+key, nil)
		return nil, false
	}
	return cs, true
}

func (a *sessionCache) Put(key string, cs *tls.ClientSessionState) {
	if cs != nil {
		leaf := a.peer.Load()
		_, st, err := cs.ResumptionState()
		if leaf == nil || err != nil || st == nil {
			return // nothing to tag it with: not kept (a full handshake next)
		}
		tag := make([]byte, len(peerTag), len(peerTag)+16)
		copy(tag, peerTag)
		tag = binary.BigEndian.AppendUint64(tag, uint64(leaf.NotBefore.Unix()))
		tag = binary.BigEndian.AppendUint64(tag, uint64(leaf.NotAfter.Unix()))
		st.Extra = append(st.Extra, tag) // crypto/tls's client ignores Extra; only appended to
	}
	a.inner.Put(a.addr+"|"+key, cs)
}

// peerValidity reads the tag Put added.
func peerValidity(cs *tls.ClientSessionState) (notBefore, notAfter time.Time, ok bool) {
	_, st, err := cs.ResumptionState()
	if err != nil || st == nil {
		return time.Time{}, time.Time{}, false
	}
	for _, e := range st.Extra {
		if len(e) == len(peerTag)+16 && string(e[:len(peerTag)]) == peerTag {
			v := e[len(peerTag):]
			return time.Unix(int64(binary.BigEndian.Uint64(v)), 0), time.Unix(int64(binary.BigEndian.Uint64(v[8:])), 0), true
		}
	}
	return time.Time{}, time.Time{}, false
}

// Conn is a verified mTLS connection, registered with its Manager until closed.
type Conn struct {
	*tls.Conn
	peer    Peer
	m       *Manager
	key     string              // peer serial, hex
	chain   []*x509.Certificate // the peer's, as verified (SetTrust checks it against a new bundle)
	at      time.Time           // when it was verified
	alpn    string
	resumed bool
	once    sync.Once
	// The own certificate generation it was made with, and when its peer's
	// certificate gets old (RetireAt).
	ownGen   uint64
	retireAt time.Time
	// onRetire, set by OnRetire, is run once by Sweep when the connection got
	// old (retireFired says it ran).
	onRetire    atomic.Pointer[func()]
	retireFired atomic.Bool
}

// OnRetire asks Sweep to run drain once, in a goroutine of its own, when the
// connection gets old: this sidecar renewed its certificate since the handshake
// (the peer cuts the connection at the old one's NotAfter), or the peer's
// certificate is past its retire point (Sweep cuts it at its NotAfter). The
// HTTP/2 server registers a graceful GOAWAY, so a client that does not retire
// connections itself (a proxyless grpc-go client; Weft's pools do,
// cluster/retire.go) moves to a fresh handshake, with both sides' current
// certificates, before either cut, with no request lost. drain must be safe to
// run while the connection serves.
func (c *Conn) OnRetire(drain func()) { c.onRetire.Store(&drain) }

// OwnGeneration is the generation (svid.Holder.Generation) of this sidecar's
// certificate when the connection was made. A pool compares it with
// Manager.OwnGeneration: a connection of an older one carries a certificate
// that a renewal replaced, which the peer will cut at its NotAfter, so it takes
// no new request. (On the server side it is the generation when the handshake
// began, which a renewal during the handshake makes one too old: that
// connection is drained early, never late.)
func (c *Conn) OwnGeneration() uint64 { return c.ownGen }

// RetireAt is when the connection should take no new request because its
// peer's certificate gets old (see RetireAt): a pool stops using it, and an
// OnRetire drain runs.
func (c *Conn) RetireAt() time.Time { return c.retireAt }

// Peer is the verified peer.
func (c *Conn) Peer() Peer { return c.peer }

// NegotiatedProtocol is the ALPN protocol agreed ("" if none).
func (c *Conn) NegotiatedProtocol() string { return c.alpn }

// Resumed says the handshake resumed a session (no certificates exchanged; the
// peer was verified again from the session's).
func (c *Conn) Resumed() bool { return c.resumed }

// Close closes the connection and removes it from the live registry.
func (c *Conn) Close() error {
	c.once.Do(func() { c.m.forget(c) })
	return c.Conn.Close()
}

// PeerID returns the verified SPIFFE ID of c's peer when c is an mTLS
// connection made or accepted by a Manager (false for plaintext): the principal
// authorization uses.
func PeerID(c net.Conn) (spiffeid.ID, bool) {
	if tc := Of(c); tc != nil {
		return tc.peer.ID, true
	}
	return spiffeid.ID{}, false
}

// Of returns the *Conn under c's wrappers (those with a NetConn method, a few
// deep at most), or nil for a plaintext connection.
func Of(c net.Conn) *Conn {
	for range 4 {
		switch x := c.(type) {
		case *Conn:
			return x
		case interface{ NetConn() net.Conn }:
			c = x.NetConn()
		default:
			return nil
		}
	}
	return nil
}
