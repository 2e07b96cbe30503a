package certclient

import (
	"time"

	"github.com/weft-mesh/weft/sidecar/svid"
)

// Renewal timing. A certificate is renewed at a point drawn uniformly from
// [RenewFraction, RenewFraction+JitterFraction) of its usable lifetime (50%..60%:
// a 24h certificate renews 12h..14h24m after it arrived), so sidecars started
// together do not all ask at once, and half the lifetime is left to retry in
// when pilot is away. The usable lifetime runs from when the certificate was
// received (clamped into [NotBefore, NotAfter]) to NotAfter, not from
// NotBefore: the CA backdates NotBefore by a minute for clock skew, which
// would otherwise make a short-lived certificate look half spent on arrival.
const (
	RenewFraction  = 0.5
	JitterFraction = 0.1
)

// Retry timing. The n-th consecutive failure (n >= 1) waits a time drawn
// uniformly from [d/2, d) with d = min(InitialBackoff*2^(n-1), cap) ("equal
// jitter": never less than half, so a fleet spreads but no retry is instant).
// cap is MaxBackoff, lowered to a tenth of the usable lifetime of the
// certificate held (or last held), never below InitialBackoff: a 10s certificate retries
// at least every second, so a short-lived one is not left expired for long
// after pilot returns.
const (
	InitialBackoff = time.Second
	MaxBackoff     = time.Minute
	// BackoffLifetimeDivisor: cap = lifetime / BackoffLifetimeDivisor.
	BackoffLifetimeDivisor = 10
)

// Usable is the part of s's lifetime left when it was received: NotAfter
// minus received clamped into [NotBefore, NotAfter].
func Usable(s *svid.SVID, received time.Time) time.Duration {
	start := received
	if start.Before(s.NotBefore) {
		start = s.NotBefore
	}
	if start.After(s.NotAfter) {
		start = s.NotAfter
	}
	return s.NotAfter.Sub(start)
}

// RenewAt is when s, received at received, should be renewed, for u in [0, 1)
// (the jitter draw).
func RenewAt(s *svid.SVID, received time.Time, u float64) time.Time {
	l := Usable(s, received)
	return s.NotAfter.Add(-l).Add(time.Duration(float64(l) * (RenewFraction + JitterFraction*clamp01(u))))
}

// RetryCap is the longest wait between retries while holding (or having held)
// a certificate of the given lifetime; 0 means none was ever held.
func RetryCap(lifetime time.Duration) time.Duration {
	if lifetime <= 0 {
		return MaxBackoff
	}
	return min(MaxBackoff, max(InitialBackoff, lifetime/BackoffLifetimeDivisor))
}

// RetryDelay is the wait after the failures-th consecutive failed attempt
// (failures >= 1), for u in [0, 1).
func RetryDelay(failures int, lifetime time.Duration, u float64) time.Duration {
	c := RetryCap(lifetime)
	d := InitialBackoff
	for i := 1; i < failures && d < c; i++ {
		d *= 2
	}
	d = min(d, c)
	return d/2 + time.Duration(float64(d/2)*clamp01(u))
}

// Credential is what authenticates a CSR.
type Credential int

const (
	// Token is the bootstrap token (--token-file): the first CSR, and any
	// CSR made while no valid certificate is held (it expired with pilot away).
	Token Credential = iota
	// Certificate is the current certificate, presented as the TLS client
	// certificate: every renewal while it is still valid.
	Certificate
)

func (c Credential) String() string {
	if c == Certificate {
		return "certificate"
	}
	return "token"
}

// CredentialFor is how a CSR made at now authenticates while s is held: with
// the certificate while it is valid for at least margin more (so it does not
// lapse mid-call), otherwise with the token.
func CredentialFor(s *svid.SVID, now time.Time, margin time.Duration) Credential {
	if s != nil && s.ValidAt(now) && s.ValidAt(now.Add(margin)) {
		return Certificate
	}
	return Token
}

// NextAttempt is when the client asks next, at now: after failures
// consecutive failed attempts (failures > 0), now + RetryDelay for the usable
// lifetime of the certificate last held (lastLifetime, 0 if none); otherwise
// the RenewAt of s (received at received), or now if that has passed or no
// certificate is held (the first CSR). u is the jitter draw, made once per
// certificate by the caller so re-planning does not move the renewal.
func NextAttempt(s *svid.SVID, received time.Time, failures int, lastLifetime time.Duration, now time.Time, u float64) time.Time {
	if failures > 0 {
		return now.Add(RetryDelay(failures, lastLifetime, u))
	}
	if s == nil {
		return now
	}
	if at := RenewAt(s, received, u); at.After(now) {
		return at
	}
	return now
}

func clamp01(u float64) float64 {
	switch {
	case u < 0:
		return 0
	case u >= 1:
		return 0.999999999
	}
	return u
}
