package admin

import (
	"fmt"
	"strconv"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/weft-mesh/weft/sidecar/authz"
)

// AuthzCollector exports authorization's decisions and Overrides from the
// sidecar's long-lived authz.State (atomics and a short lock the request path
// never takes):
//
//	weft_sidecar_authz_decisions_total{policy,action,decision,dry_run}
//	weft_sidecar_authz_overrides{state="active"|"expired"}
//
// policy is pilot's "<ns>/<name>", "none" for an ALLOW set's denial when no
// policy matched (and for fail-closed denials, action EXPIRED), "other" past
// authz.MaxPolicyNames distinct names; action ALLOW, DENY, AUDIT, OVERRIDE or
// EXPIRED; decision allow or deny (what the policy decided, or would have in a
// dry run).
type AuthzCollector struct {
	st  *authz.State
	now func() time.Time

	decisions, overrides *prometheus.Desc
}

// NewAuthzCollector reads st; now is the clock Overrides are judged on (nil:
// time.Now).
func NewAuthzCollector(st *authz.State, now func() time.Time) (*AuthzCollector, error) {
	if st == nil {
		return nil, fmt.Errorf("%w: authz collector: state is nil", ErrConfig)
	}
	if now == nil {
		now = time.Now
	}
	return &AuthzCollector{st: st, now: now,
		decisions: prometheus.NewDesc("weft_sidecar_authz_decisions_total",
			"Authorization results on inbound requests and connections, by deciding policy (none: no ALLOW policy matched or failed closed; other: names past the cap), action, decision and dry run.",
			[]string{"policy", "action", "decision", "dry_run"}, nil),
		overrides: prometheus.NewDesc("weft_sidecar_authz_overrides",
			"Overrides in the active configuration, by whether they are still enforced (active) or past min(expiresAt, first sighting + ttl) (expired).",
			[]string{"state"}, nil),
	}, nil
}

// Describe implements prometheus.Collector.
func (c *AuthzCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- c.decisions
	ch <- c.overrides
}

// Collect implements prometheus.Collector.
func (c *AuthzCollector) Collect(ch chan<- prometheus.Metric) {
	for _, n := range c.st.Counts() {
		d := "allow"
		if n.Deny {
			d = "deny"
		}
		ch <- prometheus.MustNewConstMetric(c.decisions, prometheus.CounterValue, float64(n.N), n.Policy, n.Action, d, strconv.FormatBool(n.DryRun))
	}
	active, expired := c.st.OverrideCounts(c.now())
	ch <- prometheus.MustNewConstMetric(c.overrides, prometheus.GaugeValue, float64(active), "active")
	ch <- prometheus.MustNewConstMetric(c.overrides, prometheus.GaugeValue, float64(expired), "expired")
}
