package mtls

import (
	"fmt"
	"time"

	"github.com/weft-mesh/weft/certs/revoke"
	"github.com/weft-mesh/weft/sidecar/svid"
)

// Certificate states (weft_sidecar_certificate_state{state}).
const (
	CertMissing     = "missing"
	CertValid       = "valid"
	CertNotYetValid = "not_yet_valid"
	CertExpired     = "expired"
)

// CRL states (weft_sidecar_crl_state{state}): revoke.State's names, and missing.
const (
	CRLMissing = "missing"
	CRLFresh   = "fresh"
	CRLLapsed  = "lapsed"
	CRLExpired = "expired"
)

// CertStates and CRLStates list every state label.
var (
	CertStates = []string{CertMissing, CertValid, CertNotYetValid, CertExpired}
	CRLStates  = []string{CRLMissing, CRLFresh, CRLLapsed, CRLExpired}
)

// Status is the identity part of readiness and /metrics at one time.
type Status struct {
	// Needed: the active configuration has TLS chains or TLS clusters.
	Needed        bool
	Cert          string        // Cert* state
	CertExpiresIn time.Duration // NotAfter - now (negative once expired); 0 when missing
	CRL           string        // CRL* state
	CRLNumber     int64
	CRLAge        time.Duration // now - ThisUpdate
	CRLNextUpdate time.Duration // NextUpdate - now (negative once past)
	// Ready is false when mTLS is needed and cannot be done: the certificate is
	// missing or not valid, or the CRL is missing or past NextUpdate + grace.
	Ready  bool
	Reason string // why not ready ("" when ready)
}

// Status reports the identity state at now.
func (m *Manager) Status(now time.Time) Status {
	st := status(m.cfg.SVID.Load(), m.trust.Load(), now, m.cfg.CRLGrace)
	return st
}

// status is Status's pure core.
func status(s *svid.SVID, ts *trustState, now time.Time, grace time.Duration) Status {
	var st Status
	var t *Trust
	if ts != nil {
		st.Needed, t = ts.needed, ts.t
	}
	switch {
	case s == nil:
		st.Cert = CertMissing
	case now.After(s.NotAfter):
		st.Cert, st.CertExpiresIn = CertExpired, s.NotAfter.Sub(now)
	case now.Before(s.NotBefore):
		st.Cert, st.CertExpiresIn = CertNotYetValid, s.NotAfter.Sub(now)
	default:
		st.Cert, st.CertExpiresIn = CertValid, s.NotAfter.Sub(now)
	}
	if t == nil {
		st.CRL = CRLMissing
	} else {
		c := t.crl
		st.CRLNumber, st.CRLAge, st.CRLNextUpdate = c.Number(), now.Sub(c.ThisUpdate()), c.NextUpdate().Sub(now)
		switch c.State(now, grace) {
		case revoke.Fresh:
			st.CRL = CRLFresh
		case revoke.Lapsed:
			st.CRL = CRLLapsed
		default:
			st.CRL = CRLExpired
		}
	}
	st.Ready = true
	if st.Needed {
		if err := checkOwn(s, now); err != nil {
			st.Ready, st.Reason = false, err.Error()
		} else if err := checkTrust(t, now, grace); err != nil {
			st.Ready, st.Reason = false, err.Error()
		}
	}
	return st
}

// Lines are the readiness body's identity lines:
//
//	certificate: valid expires-in=23h59m0s
//	crl: fresh age=5m0s next-update-in=55m0s
//
// plus "mtls: not ready: <reason>" when mTLS is needed and cannot be done.
func (s Status) Lines() string {
	out := "certificate: " + s.Cert
	if s.Cert != CertMissing {
		out += " expires-in=" + s.CertExpiresIn.Round(time.Second).String()
	}
	out += "\ncrl: " + s.CRL
	if s.CRL != CRLMissing {
		out += fmt.Sprintf(" number=%d age=%s next-update-in=%s", s.CRLNumber, s.CRLAge.Round(time.Second), s.CRLNextUpdate.Round(time.Second))
	}
	if !s.Ready {
		out += "\nmtls: not ready: " + s.Reason
	}
	return out
}

// Counts are the Manager's counters, for /metrics.
type Counts struct {
	// Handshakes by side (SideServer, SideClient) then result label.
	Handshakes        map[string]map[string]uint64
	PlaintextAccepted uint64
	PlaintextRefused  uint64
	ClosedRevoked     uint64 // live connections closed because a new CRL revoked the peer
	ClosedUntrusted   uint64 // live connections closed because a new bundle does not anchor the peer's chain
	ClosedExpired     uint64 // live connections closed because a certificate expired
	Retired           uint64 // live connections asked to drain because a certificate got old (Conn.OnRetire)
	Live              int
}

// Counts reads the counters.
func (m *Manager) Counts() Counts {
	c := Counts{Handshakes: map[string]map[string]uint64{}, PlaintextAccepted: m.plainAccepted.Load(),
		PlaintextRefused: m.plainRefused.Load(), ClosedRevoked: m.closedRevoked.Load(), ClosedUntrusted: m.closedUntrusted.Load(), ClosedExpired: m.closedExpired.Load(),
		Retired: m.retired.Load(), Live: m.Live()}
	for s, side := range []string{SideServer, SideClient} {
		byResult := map[string]uint64{}
		for i, r := range results {
			byResult[r] = m.counts[s][i].Load()
		}
		c.Handshakes[side] = byResult
	}
	return c
}
