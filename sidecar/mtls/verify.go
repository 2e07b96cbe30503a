package mtls

import (
	"crypto/x509"
	"errors"
	"fmt"
	"math/big"
	"slices"
	"strings"
	"time"

	"github.com/spiffe/go-spiffe/v2/spiffeid"

	"github.com/weft-mesh/weft/certs/bundle"
	"github.com/weft-mesh/weft/certs/revoke"
	"github.com/weft-mesh/weft/sidecar/svid"
)

// Results of a handshake: the result label of weft_sidecar_mtls_handshakes_total.
// Every refusal has its own, so /metrics says why mTLS stopped.
const (
	ResultOK                 = "ok"                  // full handshake, peer verified
	ResultResumed            = "resumed"             // resumed session, peer verified again
	ResultNoCertificate      = "no_certificate"      // this sidecar has no workload certificate
	ResultCertificateExpired = "certificate_expired" // this sidecar's certificate is outside NotBefore..NotAfter
	ResultNoTrust            = "no_trust"            // the active configuration carries no trust bundle and CRL
	ResultCRLExpired         = "crl_expired"         // the CRL is past NextUpdate + grace
	ResultUntrusted          = "untrusted"           // the peer's chain does not verify against the bundle
	ResultRevoked            = "revoked"             // the peer's certificate is on the CRL
	ResultUnexpectedPeer     = "unexpected_peer"     // the server's SPIFFE ID is not one the cluster expects
	ResultError              = "error"               // protocol, I/O or timeout (or the peer refused us)
)

// results lists every result label (metrics pre-create each series).
var results = [...]string{ResultOK, ResultResumed, ResultNoCertificate, ResultCertificateExpired, ResultNoTrust,
	ResultCRLExpired, ResultUntrusted, ResultRevoked, ResultUnexpectedPeer, ResultError}

// Results lists every handshake result label.
func Results() []string { return slices.Clone(results[:]) }

func resultIndex(r string) int {
	for i, x := range results {
		if x == r {
			return i
		}
	}
	return len(results) - 1
}

// ErrRefused is wrapped by every *RefusedError: the handshake was refused by this
// sidecar's own checks (fail closed), never a transient I/O failure.
var ErrRefused = errors.New("mTLS refused")

// RefusedError says why this sidecar refused (or would not start) an mTLS
// handshake. Result is one of the Result* labels.
type RefusedError struct {
	Result string
	Msg    string
}

func (e *RefusedError) Error() string { return "mTLS refused (" + e.Result + "): " + e.Msg }

// Unwrap lets errors.Is(err, ErrRefused) hold.
func (e *RefusedError) Unwrap() error { return ErrRefused }

func refused(result, format string, args ...any) *RefusedError {
	return &RefusedError{Result: result, Msg: fmt.Sprintf(format, args...)}
}

// Peer is the verified identity at the other end of an mTLS connection.
type Peer struct {
	ID                  spiffeid.ID
	Serial              *big.Int  // the leaf's serial (what the CRL lists)
	NotBefore, NotAfter time.Time // the leaf's
}

// checkOwn refuses when this sidecar's own certificate cannot be presented at now:
// past NotAfter no mTLS connection is made or accepted (never plaintext instead).
func checkOwn(s *svid.SVID, now time.Time) error {
	switch {
	case s == nil:
		return refused(ResultNoCertificate, "this sidecar has no workload certificate")
	case now.After(s.NotAfter):
		return refused(ResultCertificateExpired, "this sidecar's certificate %s (serial %x) expired at %s (%s ago)",
			s.ID, s.Cert.Leaf.SerialNumber, s.NotAfter.UTC().Format(time.RFC3339), now.Sub(s.NotAfter).Round(time.Second))
	case now.Before(s.NotBefore):
		return refused(ResultCertificateExpired, "this sidecar's certificate %s (serial %x) is not valid before %s",
			s.ID, s.Cert.Leaf.SerialNumber, s.NotBefore.UTC().Format(time.RFC3339))
	}
	return nil
}

// checkTrust refuses new handshakes without trust material or with a CRL past
// NextUpdate + grace: an unknown revocation status fails closed.
func checkTrust(t *Trust, now time.Time, grace time.Duration) error {
	if t == nil {
		return refused(ResultNoTrust, "no trust bundle and CRL (SDS secret %s) in the active configuration", RootCAName)
	}
	if t.crl.State(now, grace) == revoke.Expired {
		return refused(ResultCRLExpired, "CRL number %d is past NextUpdate %s plus grace %s (%s late): revocation status unknown",
			t.crl.Number(), t.crl.NextUpdate().UTC().Format(time.RFC3339), grace, now.Sub(t.crl.NextUpdate().Add(grace)).Round(time.Second))
	}
	return nil
}

// verify is the whole check of one handshake at now, for a full handshake and a
// resumed one alike: own certificate, trust freshness, the peer's chain against
// the bundle, the CRL, and (client side, expected non-nil) the peer's SPIFFE ID
// against the IDs the destination runs as. Pure: no clock, no state.
func verify(own *svid.SVID, t *Trust, chain []*x509.Certificate, now time.Time, grace time.Duration, expected []spiffeid.ID) (Peer, error) {
	if err := checkOwn(own, now); err != nil {
		return Peer{}, err
	}
	if err := checkTrust(t, now, grace); err != nil {
		return Peer{}, err
	}
	if len(chain) == 0 {
		return Peer{}, refused(ResultUntrusted, "the peer presented no certificate")
	}
	leaf := chain[0]
	id, err := t.bundle.Verify(chain, now)
	if err != nil {
		return Peer{}, refused(ResultUntrusted, "peer certificate serial %x: %v", leaf.SerialNumber, err)
	}
	if t.crl.Revoked(leaf.SerialNumber) {
		return Peer{}, refused(ResultRevoked, "peer %s: certificate serial %x is revoked (CRL number %d)", id, leaf.SerialNumber, t.crl.Number())
	}
	if expected != nil && !slices.Contains(expected, id) {
		return Peer{}, refused(ResultUnexpectedPeer, "server is %s, the destination runs as %s", id, idList(expected))
	}
	return Peer{ID: id, Serial: leaf.SerialNumber, NotBefore: leaf.NotBefore, NotAfter: leaf.NotAfter}, nil
}

func idList(ids []spiffeid.ID) string {
	if len(ids) == 0 {
		return "no identity"
	}
	s := make([]string, len(ids))
	for i, id := range ids {
		s[i] = id.String()
	}
	return strings.Join(s, " or ")
}

// Trust is the validated trust material of one configuration (SDS secret
// RootCAName): the bundle and a CRL whose signature was checked against it.
// Immutable.
type Trust struct {
	bundle *bundle.Bundle
	crl    *revoke.CRL
}

// RootCAName is the SDS secret carrying the trust bundle and the CRL.
const RootCAName = "ROOTCA"

// NewTrust pairs a bundle with a CRL already verified against it (revoke.Parse).
func NewTrust(b *bundle.Bundle, crl *revoke.CRL) (*Trust, error) {
	if b == nil || crl == nil {
		return nil, errors.New("mtls trust: bundle and CRL are both required")
	}
	return &Trust{bundle: b, crl: crl}, nil
}

// Bundle is the trust bundle.
func (t *Trust) Bundle() *bundle.Bundle { return t.bundle }

// CRL is the revocation list.
func (t *Trust) CRL() *revoke.CRL { return t.crl }
