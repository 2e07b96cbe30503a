package admin

import (
	"errors"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/weft-mesh/weft/sidecar/mtls"
)

// MTLSCollector exports the sidecar's identity state and mTLS counters: the
// certificate's time left and state, the CRL's age, time to NextUpdate and state
// (the signal istio#52889 asked for), and handshakes by side and result.
type MTLSCollector struct {
	m   *mtls.Manager
	now func() time.Time

	expiry, certState, crlAge, crlNext, crlState, handshakes, plainAccepted, plainRefused, closed, retired, live *prometheus.Desc
}

// NewMTLSCollector reads m at every scrape (now nil: time.Now).
func NewMTLSCollector(m *mtls.Manager, now func() time.Time) (*MTLSCollector, error) {
	if m == nil {
		return nil, errors.New("admin: mTLS collector needs a manager")
	}
	if now == nil {
		now = time.Now
	}
	d := prometheus.NewDesc
	return &MTLSCollector{m: m, now: now,
		expiry:        d("weft_sidecar_certificate_expiry_seconds", "Seconds until the workload certificate's NotAfter (negative once expired; 0 without one).", nil, nil),
		certState:     d("weft_sidecar_certificate_state", "1 for the workload certificate's state (missing, valid, not_yet_valid, expired).", []string{"state"}, nil),
		crlAge:        d("weft_sidecar_crl_age_seconds", "Seconds since the active CRL's ThisUpdate.", nil, nil),
		crlNext:       d("weft_sidecar_crl_next_update_seconds", "Seconds until the active CRL's NextUpdate (negative once past).", nil, nil),
		crlState:      d("weft_sidecar_crl_state", "1 for the CRL's state (missing, fresh, lapsed, expired: new handshakes refused).", []string{"state"}, nil),
		handshakes:    d("weft_sidecar_mtls_handshakes_total", "mTLS handshakes by side (server, client) and result (ok, resumed, or why refused).", []string{"side", "result"}, nil),
		plainAccepted: d("weft_sidecar_mtls_plaintext_accepted_total", "Plaintext connections a PERMISSIVE port accepted.", nil, nil),
		plainRefused:  d("weft_sidecar_mtls_plaintext_refused_total", "Plaintext connections closed because their port takes only mTLS (STRICT).", nil, nil),
		closed:        d("weft_sidecar_mtls_connections_closed_total", "Live mTLS connections closed by the sidecar, by reason (revoked: a new CRL lists the peer; untrusted: a new trust bundle no longer holds the root the peer's chain verified against; expired: a certificate's NotAfter passed).", []string{"reason"}, nil),
		retired:       d("weft_sidecar_mtls_connections_retired_total", "Live mTLS connections the sidecar asked to drain (HTTP/2 GOAWAY) because a certificate of their handshake got old: this sidecar renewed since, or the peer's is past its retire point; the client reconnects before either NotAfter cuts them.", nil, nil),
		live:          d("weft_sidecar_mtls_connections", "Open mTLS connections (both sides).", nil, nil),
	}, nil
}

// Describe implements prometheus.Collector.
func (c *MTLSCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{c.expiry, c.certState, c.crlAge, c.crlNext, c.crlState, c.handshakes, c.plainAccepted, c.plainRefused, c.closed, c.retired, c.live} {
		ch <- d
	}
}

// Collect implements prometheus.Collector.
func (c *MTLSCollector) Collect(ch chan<- prometheus.Metric) {
	st := c.m.Status(c.now())
	g := func(d *prometheus.Desc, v float64, labels ...string) {
		ch <- prometheus.MustNewConstMetric(d, prometheus.GaugeValue, v, labels...)
	}
	k := func(d *prometheus.Desc, v uint64, labels ...string) {
		ch <- prometheus.MustNewConstMetric(d, prometheus.CounterValue, float64(v), labels...)
	}
	g(c.expiry, st.CertExpiresIn.Seconds())
	for _, s := range mtls.CertStates {
		g(c.certState, one(st.Cert == s), s)
	}
	g(c.crlAge, st.CRLAge.Seconds())
	g(c.crlNext, st.CRLNextUpdate.Seconds())
	for _, s := range mtls.CRLStates {
		g(c.crlState, one(st.CRL == s), s)
	}
	n := c.m.Counts()
	for side, byResult := range n.Handshakes {
		for r, v := range byResult {
			k(c.handshakes, v, side, r)
		}
	}
	k(c.plainAccepted, n.PlaintextAccepted)
	k(c.plainRefused, n.PlaintextRefused)
	k(c.closed, n.ClosedRevoked, "revoked")
	k(c.closed, n.ClosedUntrusted, "untrusted")
	k(c.closed, n.ClosedExpired, "expired")
	k(c.retired, n.Retired)
	g(c.live, float64(n.Live))
}

func one(b bool) float64 {
	if b {
		return 1
	}
	return 0
}
