// Package clustername holds the rules of Weft's cluster names (API.md "Names on
// the wire") that both pilot and the sidecar apply, so the two cannot drift.
package clustername

import "strings"

// ServiceKey is the cluster name with its subset removed for an outbound cluster
// ("outbound|9080|v1|reviews.shop.svc.cluster.local" →
// "outbound|9080||reviews.shop.svc.cluster.local"); any other name is itself. A
// sidecar keeps a Service's long-lived state (breaker, outlier detector, rate
// limiter) under it and reports ejections under it.
func ServiceKey(name string) string {
	rest, ok := strings.CutPrefix(name, "outbound|")
	if !ok {
		return name
	}
	port, rest, ok := strings.Cut(rest, "|")
	if !ok {
		return name
	}
	subset, host, ok := strings.Cut(rest, "|")
	if !ok || subset == "" || strings.Contains(host, "|") {
		return name
	}
	return "outbound|" + port + "||" + host
}
