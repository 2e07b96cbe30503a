package ejectreport

import (
	"testing"

	"github.com/weft-mesh/weft/internal/outlierreport"
	"github.com/weft-mesh/weft/sidecar/cluster"
)

// Pilot maps the clusters it sent a proxy to service keys with
// outlierreport.ServiceKey; the sidecar reports under cluster.ServiceKey. They
// must agree, or EJECTED-BY's denominator misses clients.
func TestServiceKeysAgree(t *testing.T) {
	for _, name := range []string{
		"outbound|9080|v1|reviews.shop.svc.cluster.local", "outbound|9080||reviews.shop.svc.cluster.local",
		"inbound|80||", "inbound|80|v1|x", "outbound|80", "outbound|80|v1|a|b", "outbound||v1|x", "outbound|80|v1|",
		"static", "", "|||", "outbound|||",
	} {
		if a, b := outlierreport.ServiceKey(name), cluster.ServiceKey(name); a != b {
			t.Errorf("%q: outlierreport.ServiceKey %q, cluster.ServiceKey %q", name, a, b)
		}
	}
}

func FuzzServiceKeysAgree(f *testing.F) {
	f.Add("outbound|9080|v1|reviews.shop.svc.cluster.local")
	f.Fuzz(func(t *testing.T, name string) {
		if a, b := outlierreport.ServiceKey(name), cluster.ServiceKey(name); a != b {
			t.Fatalf("%q: outlierreport.ServiceKey %q, cluster.ServiceKey %q", name, a, b)
		}
	})
}
