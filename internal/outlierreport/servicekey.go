package outlierreport

import "github.com/weft-mesh/weft/internal/clustername"

// ServiceKey is the key a sidecar reports ejections under (clustername.ServiceKey,
// the rule sidecar/cluster keeps its state under), here so pilot maps the
// clusters it sent a proxy to the keys it reports by the same rule.
func ServiceKey(cluster string) string { return clustername.ServiceKey(cluster) }
