package clustername

import (
	"testing"

	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func TestServiceKey(t *testing.T) {
	for in, want := range map[string]string{
		"outbound|9080|v1|reviews.shop.svc.cluster.local": "outbound|9080||reviews.shop.svc.cluster.local",
		"outbound|9080||reviews.shop.svc.cluster.local":   "outbound|9080||reviews.shop.svc.cluster.local",
		"inbound|8080||":        "inbound|8080||",
		"outbound|9080|v1|a|b":  "outbound|9080|v1|a|b", // more fields than the form: itself
		"outbound|9080":         "outbound|9080",
		"outbound":              "outbound",
		"app":                   "app",
		"outbound|9080|v1|":     "outbound|9080||",
		"inbound|9080|v1|x.svc": "inbound|9080|v1|x.svc",
	} {
		if got := ServiceKey(in); got != want {
			t.Errorf("ServiceKey(%q) = %q, want %q", in, got, want)
		}
	}
}
