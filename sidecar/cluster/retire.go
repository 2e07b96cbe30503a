package cluster

import (
	"net"
	"time"

	"github.com/weft-mesh/weft/sidecar/mtls"
)

// Retirement of pooled mTLS connections. A connection carries the certificates
// of its handshake to its end: this sidecar's as it was then, and the peer's.
// The peer (fail closed) cuts it at the NotAfter of the first, and this
// sidecar's mtls.Manager.Sweep at that of the second, with whatever request is
// on it. So a pool retires a connection well before either: once this sidecar
// renewed its certificate (the connection was made with an older own
// generation, mtls.Manager.OwnGeneration), or once the peer's certificate is
// past its retire point (mtls.Conn.RetireAt: the peer renewed by then). A
// retired connection takes no new request; the ones on it finish, then it
// closes, as an HTTP/2 GOAWAY drains. A trust bundle change needs no
// retirement: adding a root leaves every connection valid, and one whose root
// was dropped must not finish anything (mtls.Manager.SetTrust closes it).

// tlsAge is what a pooled mTLS connection's retirement is decided from.
type tlsAge struct {
	ownGen   uint64    // this sidecar's certificate generation at the handshake
	retireAt time.Time // the peer certificate's retire point
}

// ageOf reads an mTLS connection's age; false for a plaintext one.
func ageOf(nc net.Conn) (tlsAge, bool) {
	tc, ok := nc.(*mtls.Conn)
	if !ok {
		return tlsAge{}, false
	}
	return tlsAge{ownGen: tc.OwnGeneration(), retireAt: tc.RetireAt()}, true
}

// stale: a connection of age a takes no new request at now. One atomic load
// and two compares: the HTTP/1.1 path runs it on every reuse.
func (a *tlsAge) stale(m *mtls.Manager, now time.Time) bool {
	return a.ownGen != m.OwnGeneration() || !now.Before(a.retireAt)
}

// retired: c (an mTLS connection, from a pool whose MTLS made it) takes no new
// request at now.
func (p *Pool) retired(c *Conn, now time.Time) bool {
	return c.tls && c.age.stale(p.cfg.MTLS, now)
}

// h2dial carries an mTLS endpoint through net/http's dial hook, and brings
// back the connection made for it.
type h2dial struct {
	e    *Endpoint
	conn net.Conn
}

// adoptTLSLocked records an mTLS connection's own generation and arms its
// retirement at the peer certificate's retire point. Before hc is published
// (under p.mu).
func (p *H2Pool) adoptTLSLocked(hc *h2conn, d *h2dial) {
	a, ok := ageOf(d.conn)
	if !ok {
		return
	}
	hc.tls, hc.ownGen = true, a.ownGen
	hc.retireTimer = time.AfterFunc(time.Until(a.retireAt), func() { retireH2(hc) })
}

// staleH2 reports that hc takes no new stream: retired already, or made with
// an own certificate older than gen (the current one), which retires it now.
func staleH2(hc *h2conn, gen uint64) bool {
	if hc.retired.Load() {
		return true
	}
	if !hc.tls || hc.ownGen == gen {
		return false
	}
	retireH2(hc)
	return true
}

// retireH2 takes hc out of service: no new stream from now on (Get looks at
// retired before and after reserving one, as with draining), and closed as
// soon as it has none in flight (here, or by its state hook after the last).
func retireH2(hc *h2conn) {
	if hc.retired.Swap(true) {
		return
	}
	if hc.cc.InFlight() == 0 {
		hc.cc.Close()
	}
}
