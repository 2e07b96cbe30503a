// Package svid holds the sidecar's own workload X.509-SVID: the certificate and
// key the certificate client obtained, swapped atomically on renewal.
//
// One writer (sidecar/certclient) calls Store; any number of readers (the mTLS
// data path, the xDS client's dialer, readiness and metrics) call Load on each
// new handshake and may wait on Changed to learn of a new certificate. A
// connection made with an older SVID keeps going: the holder never reaches
// into live connections (upstream pools compare Generation and retire theirs,
// sidecar/cluster). Marshal and Parse are the persisted form
// (sidecar/certclient keeps it in the state directory).
package svid

import (
	"crypto"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/spiffe/go-spiffe/v2/spiffeid"
	"github.com/spiffe/go-spiffe/v2/svid/x509svid"
)

// SVID is one workload certificate with its private key. It is immutable once
// stored: renewal stores a new *SVID, it never changes one.
type SVID struct {
	// Cert is the chain (leaf first, no root) with its PrivateKey; Leaf is set.
	Cert tls.Certificate
	// ID is the leaf's only URI SAN.
	ID spiffeid.ID
	// NotBefore and NotAfter are the leaf's validity window.
	NotBefore, NotAfter time.Time
}

// ErrEmpty is returned by the tls callbacks while no SVID is held.
var ErrEmpty = errors.New("svid: no workload certificate yet")

// New builds an SVID from a chain (leaf first, without the root) and the
// private key of the leaf. The leaf must carry exactly one URI SAN that is a
// SPIFFE ID, and key must be the leaf's key.
func New(chain []*x509.Certificate, key crypto.Signer) (*SVID, error) {
	if len(chain) == 0 {
		return nil, errors.New("svid: empty certificate chain")
	}
	if key == nil {
		return nil, errors.New("svid: no private key")
	}
	leaf := chain[0]
	id, err := x509svid.IDFromCert(leaf)
	if err != nil {
		return nil, fmt.Errorf("svid: leaf serial %s: %w", leaf.SerialNumber, err)
	}
	if !publicKeyEqual(leaf.PublicKey, key.Public()) {
		return nil, fmt.Errorf("svid: leaf serial %s (%s): public key does not match the private key", leaf.SerialNumber, id)
	}
	if !leaf.NotBefore.Before(leaf.NotAfter) {
		return nil, fmt.Errorf("svid: leaf serial %s (%s): NotBefore %s is not before NotAfter %s",
			leaf.SerialNumber, id, leaf.NotBefore.UTC().Format(time.RFC3339), leaf.NotAfter.UTC().Format(time.RFC3339))
	}
	der := make([][]byte, len(chain))
	for i, c := range chain {
		der[i] = c.Raw
	}
	return &SVID{
		Cert:      tls.Certificate{Certificate: der, PrivateKey: key, Leaf: leaf},
		ID:        id,
		NotBefore: leaf.NotBefore,
		NotAfter:  leaf.NotAfter,
	}, nil
}

func publicKeyEqual(a, b crypto.PublicKey) bool {
	type equaler interface{ Equal(crypto.PublicKey) bool }
	e, ok := a.(equaler)
	return ok && e.Equal(b)
}

// Lifetime is NotAfter - NotBefore.
func (s *SVID) Lifetime() time.Duration { return s.NotAfter.Sub(s.NotBefore) }

// ValidAt reports whether now is inside [NotBefore, NotAfter].
func (s *SVID) ValidAt(now time.Time) bool {
	return !now.Before(s.NotBefore) && !now.After(s.NotAfter)
}

// Holder is the current SVID of the process. The zero value is empty and ready.
type Holder struct {
	cur atomic.Pointer[SVID] // written by Store only
	// gen counts Stores, moved after cur: a reader that loads Generation before
	// Load sees an SVID at least that new, so a connection that records the
	// generation before its handshake never claims a newer certificate than it
	// presented (upstream pools retire connections of an older generation).
	gen atomic.Uint64

	mu      sync.Mutex    // guards changed
	changed chan struct{} // closed and replaced by Store
}

// Load returns the current SVID, or nil before the first Store. It does not
// allocate or lock: the mTLS handshake path calls it.
func (h *Holder) Load() *SVID { return h.cur.Load() }

// Generation counts the Stores so far (0 before the first). It does not
// allocate or lock: upstream pools compare it on every Get.
func (h *Holder) Generation() uint64 { return h.gen.Load() }

// Store makes s the current SVID (nil empties the holder) and wakes every
// Changed waiter. New handshakes use s; live connections are not touched.
func (h *Holder) Store(s *SVID) {
	h.cur.Store(s)
	h.gen.Add(1)
	h.mu.Lock()
	if h.changed != nil {
		close(h.changed) // close never blocks: no send under the lock
	}
	h.changed = make(chan struct{})
	h.mu.Unlock()
}

// Changed returns a channel closed at the next Store after this call. Take it
// before Load to miss no change:
//
//	ch := h.Changed(); s := h.Load(); ...; <-ch
func (h *Holder) Changed() <-chan struct{} {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.changed == nil {
		h.changed = make(chan struct{})
	}
	return h.changed
}

// GetCertificate is a tls.Config.GetCertificate that serves the current SVID,
// so a renewal is used by the next handshake.
func (h *Holder) GetCertificate(*tls.ClientHelloInfo) (*tls.Certificate, error) {
	return h.current()
}

// GetClientCertificate is a tls.Config.GetClientCertificate that presents the
// current SVID, so a renewal is used by the next handshake.
func (h *Holder) GetClientCertificate(*tls.CertificateRequestInfo) (*tls.Certificate, error) {
	return h.current()
}

func (h *Holder) current() (*tls.Certificate, error) {
	s := h.cur.Load()
	if s == nil {
		return nil, ErrEmpty
	}
	return &s.Cert, nil
}
