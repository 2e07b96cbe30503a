package mtls

import "time"

// RetireFraction is how far into its peer's certificate lifetime a pooled
// client connection stops taking new requests. Sidecars renew at 50%..60%
// (sidecar/certclient), so a connection made after this point is made with the
// peer's renewed certificate, and the last quarter is left for the requests in
// flight to finish before the old NotAfter, where Sweep closes the connection
// (fail closed) with whatever is still on it.
const RetireFraction = 0.75

// RetireAt is when a pooled client connection made at made, to a peer whose
// certificate is valid notBefore..notAfter, should take no new request: the
// RetireFraction point of that lifetime, or, for a connection made after it
// (the peer did not renew: its pilot is away), halfway from made to notAfter.
// The halving bounds the redials while such a certificate lasts (each new
// connection keeps half the time left) instead of one per request, and still
// drains a connection before the certificate it carries ends, should the peer
// renew meanwhile. Pure.
func RetireAt(notBefore, notAfter, made time.Time) time.Time {
	if at := retirePoint(notBefore, notAfter); made.Before(at) {
		return at
	}
	return made.Add(notAfter.Sub(made) / 2)
}

// retirePoint is the RetireFraction point of notBefore..notAfter.
func retirePoint(notBefore, notAfter time.Time) time.Time {
	return notBefore.Add(time.Duration(float64(notAfter.Sub(notBefore)) * RetireFraction))
}

// resumable says a cached session whose peer certificate is valid
// notBefore..notAfter may be resumed at now: before its retire point. A
// resumed TLS 1.3 session exchanges no certificates, so each resumption (and
// the ticket it brings) carries the peer's certificate of the first full
// handshake on, past the peer's renewal, until it expires; a full handshake
// after the retire point fetches the renewed one.
func resumable(notBefore, notAfter, now time.Time) bool {
	return now.Before(retirePoint(notBefore, notAfter))
}
