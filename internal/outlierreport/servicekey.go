package outlierreport

import "strings"

// ServiceKey is the key a sidecar reports ejections under: the cluster name
// with its subset removed (outbound|9080|v1|reviews.shop.svc.cluster.local is
// outbound|9080||reviews.shop.svc.cluster.local); any other name is itself.
// It is the rule of sidecar/cluster.ServiceKey, here so pilot can map the
// clusters it sent a proxy to the keys it reports (pilot never imports
// sidecar/...); a test in the sidecar checks the two agree.
func ServiceKey(cluster string) string {
	dir, rest, ok := strings.Cut(cluster, "|")
	if !ok || dir != "outbound" {
		return cluster
	}
	port, rest, ok := strings.Cut(rest, "|")
	if !ok {
		return cluster
	}
	subset, host, ok := strings.Cut(rest, "|")
	if !ok || subset == "" || strings.Contains(host, "|") {
		return cluster
	}
	return dir + "|" + port + "||" + host
}
