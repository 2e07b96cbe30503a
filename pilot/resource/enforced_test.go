package resource

import (
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

// TestNotEnforcedNamesKnownFields: every NotEnforced entry names a field
// fieldsSet can find (a typo would silently never warn) and says why.
func TestNotEnforcedNamesKnownFields(t *testing.T) {
	for f, why := range NotEnforced {
		if _, ok := fieldsSet[f]; !ok {
			t.Errorf("NotEnforced[%q]: no such field in fieldsSet", f)
		}
		if why == "" {
			t.Errorf("NotEnforced[%q]: no reason", f)
		}
	}
}

// TestNotEnforcedWarnings: an object setting a field of the table gets one
// warning per place it sets it, naming the object, the field and the reason; an
// object not setting it gets none; the warning reaches ValidateSet's output.
func TestNotEnforcedWarnings(t *testing.T) {
	table := map[string]string{
		"spec.outlierDetection.maxEjectionTimeJitter": "jitter is ignored",
		"spec.localRateLimit.dryRun":                  "dry run is ignored",
		"spec.http[].retries.perTryTimeout":           "per-try timeouts are ignored",
		"spec.http[].retries.retryOn=refused-stream":  "refused-stream is ignored",
	}
	withAll := object(KindDestinationPolicy, meta("shop", "d"), &DestinationPolicySpec{Service: "reviews",
		OutlierDetection: &OutlierDetection{Consecutive5xx: 5, MaxEjectionTimeJitter: "1s"},
		LocalRateLimit:   &LocalRateLimit{RequestsPerSecond: 10, DryRun: true}})
	without := object(KindDestinationPolicy, meta("shop", "e"), &DestinationPolicySpec{Service: "reviews",
		OutlierDetection: &OutlierDetection{Consecutive5xx: 5}, LocalRateLimit: &LocalRateLimit{RequestsPerSecond: 10}})
	dest := []RouteDestination{{Destination: Destination{Service: "reviews"}, Weight: 100}}
	rt := object(KindRoute, meta("shop", "r"), &RouteSpec{Hosts: []string{"reviews"}, HTTP: []HTTPRoute{
		{Route: dest, Retries: &RetryPolicy{Attempts: 2, RetryOn: []string{"5xx"}}},
		{Route: dest, Retries: &RetryPolicy{Attempts: 2, PerTryTimeout: "1s", RetryOn: []string{"reset", "refused-stream"}}},
	}})
	for _, tc := range []struct {
		o    *Object
		want []string
	}{
		{withAll, []string{
			"DestinationPolicy/shop/d: spec.localRateLimit.dryRun: accepted but not enforced by Weft sidecars yet: dry run is ignored",
			"DestinationPolicy/shop/d: spec.outlierDetection.maxEjectionTimeJitter: accepted but not enforced by Weft sidecars yet: jitter is ignored",
		}},
		{without, nil},
		{rt, []string{
			"Route/shop/r: spec.http[1].retries.perTryTimeout: accepted but not enforced by Weft sidecars yet: per-try timeouts are ignored",
			"Route/shop/r: spec.http[1].retries.retryOn[1]: accepted but not enforced by Weft sidecars yet: refused-stream is ignored",
		}},
	} {
		if d := cmp.Diff(tc.want, notEnforcedWarnings(tc.o, table)); d != "" {
			t.Errorf("%s (-want +got):\n%s", tc.o.Key(), d)
		}
	}

	// Through the set validation.
	svc := object(KindService, meta("shop", "reviews"), &ServiceSpec{Ports: []ServicePort{{Name: "http", Port: 80}}})
	errs, warns := validateSet([]*Object{svc, withAll}, table)
	if len(errs) > 0 {
		t.Fatal(errs)
	}
	if len(warns) != 2 || !strings.Contains(warns[0], "spec.localRateLimit.dryRun: accepted but not enforced") {
		t.Errorf("ValidateSet warnings = %q", warns)
	}
}

// TestEveryFieldSetterFinds: each fieldsSet entry finds its field in an object
// that sets everything, so a table entry for any of them warns.
func TestEveryFieldSetterFinds(t *testing.T) {
	dp := object(KindDestinationPolicy, meta("shop", "d"), &DestinationPolicySpec{Service: "reviews",
		ConnectionPool: &ConnectionPool{MaxConnections: 1, MaxPendingRequests: 1, MaxRequests: 1, MaxRetries: 1, RetryBudget: &RetryBudget{Percent: 20}, ConnectTimeout: "1s"},
		OutlierDetection: &OutlierDetection{Consecutive5xx: 1, ConsecutiveGatewayErrors: 1, ConsecutiveLocalOriginFailures: 1, SplitExternalLocalOriginErrors: ptr(true),
			SuccessRate: &SuccessRate{}, FailurePercentage: &FailurePercentage{Threshold: 1}, Interval: "1s", BaseEjectionTime: "1s", MaxEjectionTime: "1s",
			MaxEjectionTimeJitter: "1s", MaxEjectionPercent: 1, MinHealthPercent: ptr(1.0)},
		LocalRateLimit: &LocalRateLimit{RequestsPerSecond: 1, DryRun: true}})
	rt := object(KindRoute, meta("shop", "r"), &RouteSpec{Hosts: []string{"reviews"}, HTTP: []HTTPRoute{{
		Route: []RouteDestination{{Destination: Destination{Service: "reviews"}, Weight: 100}}, Timeout: "1s",
		Retries:  &RetryPolicy{Attempts: 1, PerTryTimeout: "1s", RetryOn: retryOnValues},
		Fallback: []FallbackDestination{{Destination: Destination{Service: "backup"}}},
	}}})
	for f, set := range fieldsSet {
		if len(set(dp))+len(set(rt)) == 0 {
			t.Errorf("fieldsSet[%q] finds nothing in an object setting every field", f)
		}
		if strings.HasPrefix(f, "spec.http") && len(set(dp)) > 0 || !strings.HasPrefix(f, "spec.http") && len(set(rt)) > 0 {
			t.Errorf("fieldsSet[%q] finds a field in the wrong kind", f)
		}
	}
}

// TestTCPOnlyPoolWarnings: the HTTP-only connectionPool fields warn on a
// DestinationPolicy for a TCP-only Service, not for one with an HTTP port, and
// maxConnections never does.
func TestTCPOnlyPoolWarnings(t *testing.T) {
	tcp := object(KindService, meta("shop", "db"), &ServiceSpec{Ports: []ServicePort{{Name: "sql", Port: 5432, Protocol: "TCP"}}})
	mixed := object(KindService, meta("shop", "web"), &ServiceSpec{Ports: []ServicePort{{Name: "sql", Port: 5432, Protocol: "TCP"}, {Name: "http", Port: 80, Protocol: "HTTP"}}})
	pool := &ConnectionPool{MaxConnections: 10, MaxPendingRequests: 1, MaxRequests: 2, MaxRetries: 3, RetryBudget: &RetryBudget{Percent: 20}}
	dp := func(name, svc string) *Object {
		return object(KindDestinationPolicy, meta("shop", name), &DestinationPolicySpec{Service: svc, ConnectionPool: pool})
	}
	errs, warns := validateSet([]*Object{tcp, mixed, dp("db", "db"), dp("web", "web")}, nil)
	if len(errs) > 0 {
		t.Fatal(errs)
	}
	const why = ": not enforced: Service shop/db has only TCP ports, and a TCP connection has no requests, retries or pending queue (maxConnections applies)"
	want := []string{
		"DestinationPolicy/shop/db: spec.connectionPool.maxPendingRequests" + why,
		"DestinationPolicy/shop/db: spec.connectionPool.maxRequests" + why,
		"DestinationPolicy/shop/db: spec.connectionPool.maxRetries" + why,
		"DestinationPolicy/shop/db: spec.connectionPool.retryBudget" + why,
	}
	if d := cmp.Diff(want, warns); d != "" {
		t.Errorf("warnings (-want +got):\n%s", d)
	}
}

// TestRouteToTCPWarnings: a Route host that is a TCP-only Service, and a
// destination on a TCP port, are stored but never routed: each warns.
func TestRouteToTCPWarnings(t *testing.T) {
	tcp := object(KindService, meta("shop", "db"), &ServiceSpec{Ports: []ServicePort{{Name: "sql", Port: 5432, Protocol: "TCP"}}})
	mixed := object(KindService, meta("shop", "web"), &ServiceSpec{Ports: []ServicePort{{Name: "sql", Port: 5432, Protocol: "TCP"}, {Name: "http", Port: 80, Protocol: "HTTP"}}})
	rt := func(name, host string, d Destination) *Object {
		return object(KindRoute, meta("shop", name), &RouteSpec{Hosts: []string{host}, HTTP: []HTTPRoute{{Route: []RouteDestination{{Destination: d, Weight: 100}}}}})
	}
	objs := []*Object{tcp, mixed,
		rt("a", "db", Destination{Service: "db"}),
		rt("b", "web", Destination{Service: "web", Port: 5432}),
		rt("c", "web.other", Destination{Service: "web", Port: 80})}
	errs, warns := validateSet(objs, nil)
	if len(errs) > 0 {
		t.Fatal(errs)
	}
	want := []string{
		"Route/shop/a: spec.hosts[0]: not enforced: Service shop/db has only TCP ports, and Routes apply to HTTP ports",
		"Route/shop/a: spec.http[0].route[0].destination: not enforced: the port of Service shop/db is TCP, and an HTTP route cannot target it (destination left out)",
		"Route/shop/b: spec.http[0].route[0].destination: not enforced: the port of Service shop/web is TCP, and an HTTP route cannot target it (destination left out)",
		"Route/shop/c: spec.hosts[0]: Service other/web does not exist",
	}
	if d := cmp.Diff(want, warns); d != "" {
		t.Errorf("warnings (-want +got):\n%s", d)
	}
}
