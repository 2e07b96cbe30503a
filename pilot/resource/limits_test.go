package resource

import (
	"fmt"
	"strings"
	"testing"

	"sigs.k8s.io/yaml"
)

// Each bound is tested at the limit (valid) and one past it (the exact error).
func TestLimits(t *testing.T) {
	labels := func(n int) map[string]string {
		m := map[string]string{}
		for i := range n {
			m[fmt.Sprintf("k%d", i)] = "v"
		}
		return m
	}
	strs := func(n int, f string) []string {
		var l []string
		for i := range n {
			l = append(l, fmt.Sprintf(f, i))
		}
		return l
	}
	service := func(n int) *Object {
		s := &ServiceSpec{}
		for i := range n {
			s.Ports = append(s.Ports, ServicePort{Name: fmt.Sprintf("p%d", i), Port: int32(1000 + i)})
		}
		return object(KindService, meta("shop", "s"), s)
	}
	dest := RouteDestination{Destination: Destination{Service: "reviews"}, Weight: 100}
	route := func(f func(s *RouteSpec)) *Object {
		s := &RouteSpec{Hosts: []string{"reviews"}, HTTP: []HTTPRoute{{Route: []RouteDestination{dest}}}}
		f(s)
		return object(KindRoute, meta("shop", "r"), s)
	}
	regex := func(n int) *Object {
		return route(func(s *RouteSpec) {
			s.HTTP[0].Match = []HTTPMatch{{Path: &StringMatch{Regex: ptr("/" + strings.Repeat("a", n-1))}}}
		})
	}
	authz := func(f func(s *AuthorizationPolicySpec)) *Object {
		s := &AuthorizationPolicySpec{}
		f(s)
		return object(KindAuthorizationPolicy, meta("shop", "a"), s)
	}
	override := func(ttl Duration) *Object {
		return object(KindOverride, meta("shop", "o"), &OverrideSpec{TTL: ttl, Action: "DENY", Match: OverrideMatch{Paths: []string{"/"}}})
	}
	withMeta := func(f func(m *Metadata)) *Object {
		o := service(1)
		f(&o.Metadata)
		return o
	}

	for _, tc := range []struct {
		name    string
		atLimit *Object
		over    *Object
		wantErr string
	}{
		{"service_ports", service(MaxServicePorts), service(MaxServicePorts + 1), "Service/shop/s: spec.ports: 65 entries, limit 64"},
		{"labels", withMeta(func(m *Metadata) { m.Labels = labels(MaxLabels) }), withMeta(func(m *Metadata) { m.Labels = labels(MaxLabels + 1) }), "Service/shop/s: metadata.labels: 65 entries, limit 64"},
		{"annotations", withMeta(func(m *Metadata) { m.Annotations = labels(MaxLabels) }), withMeta(func(m *Metadata) { m.Annotations = labels(MaxLabels + 1) }), "Service/shop/s: metadata.annotations: 65 entries, limit 64"},
		{"name_length", withMeta(func(m *Metadata) { m.Name = strings.Repeat("n", MaxNameLength) }), withMeta(func(m *Metadata) { m.Name = "s" + strings.Repeat("n", MaxNameLength) }),
			"Service/shop/s" + strings.Repeat("n", 63) + `: metadata.name: "s` + strings.Repeat("n", 63) + `" is 64 characters, limit 63`},
		{"selector_labels", object(KindService, meta("shop", "s"), &ServiceSpec{Selector: labels(MaxLabels), Ports: service(1).Spec.(*ServiceSpec).Ports}),
			object(KindService, meta("shop", "s"), &ServiceSpec{Selector: labels(MaxLabels + 1), Ports: service(1).Spec.(*ServiceSpec).Ports}), "Service/shop/s: spec.selector: 65 entries, limit 64"},
		{"route_hosts", route(func(s *RouteSpec) { s.Hosts = strs(MaxRouteHosts, "h%d") }), route(func(s *RouteSpec) { s.Hosts = strs(MaxRouteHosts+1, "h%d") }), "Route/shop/r: spec.hosts: 65 entries, limit 64"},
		{"http_rules", route(func(s *RouteSpec) {
			s.HTTP = make([]HTTPRoute, MaxHTTPRules)
			fill(s.HTTP, HTTPRoute{Route: []RouteDestination{dest}})
		}),
			route(func(s *RouteSpec) {
				s.HTTP = make([]HTTPRoute, MaxHTTPRules+1)
				fill(s.HTTP, HTTPRoute{Route: []RouteDestination{dest}})
			}), "Route/shop/r: spec.http: 257 entries, limit 256"},
		{"matches_per_rule", route(func(s *RouteSpec) { s.HTTP[0].Match = make([]HTTPMatch, MaxMatchesPerRule) }), route(func(s *RouteSpec) { s.HTTP[0].Match = make([]HTTPMatch, MaxMatchesPerRule+1) }),
			"Route/shop/r: spec.http[0].match: 65 entries, limit 64"},
		{"headers_per_match", route(func(s *RouteSpec) { s.HTTP[0].Match = []HTTPMatch{{Headers: headers(MaxHeadersPerMatch)}} }),
			route(func(s *RouteSpec) { s.HTTP[0].Match = []HTTPMatch{{Headers: headers(MaxHeadersPerMatch + 1)}} }), "Route/shop/r: spec.http[0].match[0].headers: 33 entries, limit 32"},
		{"destinations_per_rule", route(func(s *RouteSpec) { s.HTTP[0].Route = dests(MaxDestinationsPerRule) }), route(func(s *RouteSpec) { s.HTTP[0].Route = dests(MaxDestinationsPerRule + 1) }),
			"Route/shop/r: spec.http[0].route: 65 entries, limit 64"},
		{"fallbacks", route(func(s *RouteSpec) {
			s.HTTP[0].Fallback = make([]FallbackDestination, MaxFallbacks)
			fill(s.HTTP[0].Fallback, FallbackDestination{Destination: dest.Destination})
		}),
			route(func(s *RouteSpec) {
				s.HTTP[0].Fallback = make([]FallbackDestination, MaxFallbacks+1)
				fill(s.HTTP[0].Fallback, FallbackDestination{Destination: dest.Destination})
			}), "Route/shop/r: spec.http[0].fallback: 9 entries, limit 8"},
		{"regex_bytes", regex(MaxRegexBytes), regex(MaxRegexBytes + 1), "Route/shop/r: spec.http[0].match[0].path.regex: regex is 257 bytes, limit 256"},
		{"retry_attempts", route(func(s *RouteSpec) { s.HTTP[0].Retries = &RetryPolicy{Attempts: MaxRetryAttempts} }), route(func(s *RouteSpec) { s.HTTP[0].Retries = &RetryPolicy{Attempts: MaxRetryAttempts + 1} }),
			"Route/shop/r: spec.http[0].retries.attempts: 11 out of range 1..10"},
		{"subsets", object(KindDestinationPolicy, meta("shop", "d"), &DestinationPolicySpec{Service: "s", Subsets: subsets(MaxSubsets)}),
			object(KindDestinationPolicy, meta("shop", "d"), &DestinationPolicySpec{Service: "s", Subsets: subsets(MaxSubsets + 1)}), "DestinationPolicy/shop/d: spec.subsets: 65 entries, limit 64"},
		{"authz_rules", authz(func(s *AuthorizationPolicySpec) { s.Rules = make([]AuthzRule, MaxAuthzRules) }), authz(func(s *AuthorizationPolicySpec) { s.Rules = make([]AuthzRule, MaxAuthzRules+1) }),
			"AuthorizationPolicy/shop/a: spec.rules: 65 entries, limit 64"},
		{"list_entries", authz(func(s *AuthorizationPolicySpec) {
			s.Rules = []AuthzRule{{To: []AuthzOperation{{Paths: strs(MaxListEntries, "/p%d")}}}}
		}),
			authz(func(s *AuthorizationPolicySpec) {
				s.Rules = []AuthzRule{{To: []AuthzOperation{{Paths: strs(MaxListEntries+1, "/p%d")}}}}
			}),
			"AuthorizationPolicy/shop/a: spec.rules[0].to[0].paths: 257 entries, limit 256"},
		{"workload_weight", object(KindWorkload, meta("shop", "w"), &WorkloadSpec{Address: "10.0.0.1", Weight: MaxWorkloadWeight}),
			object(KindWorkload, meta("shop", "w"), &WorkloadSpec{Address: "10.0.0.1", Weight: MaxWorkloadWeight + 1}), "Workload/shop/w: spec.weight: 129 out of range 1..128"},
		{"override_ttl", override("1h"), override("3601s"), "Override/shop/o: spec.ttl: 3601s exceeds the limit of 1h0m0s"},
		{"override_reason", object(KindOverride, meta("shop", "o"), &OverrideSpec{TTL: "1m", Action: "DENY", Reason: strings.Repeat("r", MaxReasonBytes), Match: OverrideMatch{Paths: []string{"/"}}}),
			object(KindOverride, meta("shop", "o"), &OverrideSpec{TTL: "1m", Action: "DENY", Reason: strings.Repeat("r", MaxReasonBytes+1), Match: OverrideMatch{Paths: []string{"/"}}}),
			"Override/shop/o: spec.reason: 1025 bytes, limit 1024"},
		{"stdev_factor", outlierPolicy(func(o *OutlierDetection) { o.SuccessRate = &SuccessRate{StdevFactor: MaxStdevFactor} }),
			outlierPolicy(func(o *OutlierDetection) { o.SuccessRate = &SuccessRate{StdevFactor: MaxStdevFactor + 0.001} }),
			"DestinationPolicy/shop/d: spec.outlierDetection.successRate.stdevFactor: 1000.001 exceeds the limit of 1000"},
		{"stdev_factor_resolution", outlierPolicy(func(o *OutlierDetection) { o.SuccessRate = &SuccessRate{StdevFactor: 1.901} }),
			outlierPolicy(func(o *OutlierDetection) { o.SuccessRate = &SuccessRate{StdevFactor: 1.9005} }),
			"DestinationPolicy/shop/d: spec.outlierDetection.successRate.stdevFactor: 1.9005 is finer than 0.001, the resolution Envoy's xDS field carries"},
		{"max_ejection_percent", outlierPolicy(func(o *OutlierDetection) { o.MaxEjectionPercent = 100 }), outlierPolicy(func(o *OutlierDetection) { o.MaxEjectionPercent = 101 }),
			"DestinationPolicy/shop/d: spec.outlierDetection.maxEjectionPercent: 101 out of range 0..100"},
		{"max_ejection_percent_whole", outlierPolicy(func(o *OutlierDetection) { o.MaxEjectionPercent = 33 }), outlierPolicy(func(o *OutlierDetection) { o.MaxEjectionPercent = 33.5 }),
			"DestinationPolicy/shop/d: spec.outlierDetection.maxEjectionPercent: 33.5 is not a whole percent (the xDS field is an integer)"},
		{"failure_threshold", outlierPolicy(func(o *OutlierDetection) { o.FailurePercentage = &FailurePercentage{Threshold: 100} }),
			outlierPolicy(func(o *OutlierDetection) { o.FailurePercentage = &FailurePercentage{Threshold: 101} }),
			"DestinationPolicy/shop/d: spec.outlierDetection.failurePercentage.threshold: 101 out of range 0..100"},
		{"failure_threshold_whole", outlierPolicy(func(o *OutlierDetection) { o.FailurePercentage = &FailurePercentage{Threshold: 1} }),
			outlierPolicy(func(o *OutlierDetection) { o.FailurePercentage = &FailurePercentage{Threshold: 1.5} }),
			"DestinationPolicy/shop/d: spec.outlierDetection.failurePercentage.threshold: 1.5 is not a whole percent (the xDS field is an integer)"},
		{"failure_threshold_required", outlierPolicy(func(o *OutlierDetection) { o.FailurePercentage = &FailurePercentage{Threshold: 1} }),
			outlierPolicy(func(o *OutlierDetection) { o.FailurePercentage = &FailurePercentage{} }),
			"DestinationPolicy/shop/d: spec.outlierDetection.failurePercentage.threshold: required: a whole percent 1..100 (0 would eject every host)"},
		{"min_health_percent", outlierPolicy(func(o *OutlierDetection) { o.MinHealthPercent = ptr(100.0) }), outlierPolicy(func(o *OutlierDetection) { o.MinHealthPercent = ptr(100.5) }),
			"DestinationPolicy/shop/d: spec.outlierDetection.minHealthPercent: 100.5 out of range 0..100"},
		{"max_ejection_time_vs_base", outlierPolicy(func(o *OutlierDetection) { o.BaseEjectionTime, o.MaxEjectionTime = "1s", "1s" }),
			outlierPolicy(func(o *OutlierDetection) { o.BaseEjectionTime, o.MaxEjectionTime = "1s", "999ms" }),
			"DestinationPolicy/shop/d: spec.outlierDetection.maxEjectionTime: 999ms is less than baseEjectionTime 1s"},
		{"max_ejection_time_vs_default_base", outlierPolicy(func(o *OutlierDetection) { o.MaxEjectionTime = "30s" }),
			outlierPolicy(func(o *OutlierDetection) { o.MaxEjectionTime = "29999ms" }),
			"DestinationPolicy/shop/d: spec.outlierDetection.maxEjectionTime: 29999ms is less than the default baseEjectionTime 30s"},
		{"outlier_interval_floor", outlierPolicy(func(o *OutlierDetection) { o.Interval = "1ms" }), outlierPolicy(func(o *OutlierDetection) { o.Interval = "999us" }),
			"DestinationPolicy/shop/d: spec.outlierDetection.interval: 999us is below the minimum of 1ms"},
		{"jitter_floor", outlierPolicy(func(o *OutlierDetection) { o.MaxEjectionTimeJitter = "1ms" }), outlierPolicy(func(o *OutlierDetection) { o.MaxEjectionTimeJitter = "999999ns" }),
			"DestinationPolicy/shop/d: spec.outlierDetection.maxEjectionTimeJitter: 999999ns is below the minimum of 1ms"},
		{"max_ejection_time_jitter", outlierPolicy(func(o *OutlierDetection) { o.MaxEjectionTimeJitter = "87600h" }),
			outlierPolicy(func(o *OutlierDetection) { o.MaxEjectionTimeJitter = "87600h1ns" }),
			"DestinationPolicy/shop/d: spec.outlierDetection.maxEjectionTimeJitter: 87600h1ns exceeds the limit of 87600h0m0s"},
		{"split_vs_local_origin", outlierPolicy(func(o *OutlierDetection) { o.SplitExternalLocalOriginErrors = ptr(false) }),
			outlierPolicy(func(o *OutlierDetection) {
				o.SplitExternalLocalOriginErrors, o.ConsecutiveLocalOriginFailures = ptr(false), 1
			}),
			"DestinationPolicy/shop/d: spec.outlierDetection.splitExternalLocalOriginErrors: false, but consecutiveLocalOriginFailures is set: that detector needs local-origin failures counted apart"},
		{"requests_per_second", ratePolicy(MaxRequestsPerSecond, 0), ratePolicy(MaxRequestsPerSecond+1, 0),
			"DestinationPolicy/shop/d: spec.localRateLimit.requestsPerSecond: 1.000000001e+09 exceeds the limit of 1e+09"},
		{"rate_limit_burst", ratePolicy(1e4, MaxRateLimitBurst), ratePolicy(1e4, MaxRateLimitBurst+1),
			"DestinationPolicy/shop/d: spec.localRateLimit.burst: 1073741825 exceeds the limit of 1073741824"},
		{"rate_limit_fill_time", ratePolicy(1, 365*24*3600), ratePolicy(1, 365*24*3600+1),
			"DestinationPolicy/shop/d: spec.localRateLimit.burst: 31536001 requests at 1 per second take 31536001s to refill, limit 8760h0m0s"},
		{"rate_limit_fill_time_default_burst", ratePolicy(1/(365*24*3600.0), 0), ratePolicy(1/(365*24*3600.0)*0.999, 0),
			"DestinationPolicy/shop/d: spec.localRateLimit.burst: 1 requests at 3.167808219178082e-08 per second take 31567568s to refill, limit 8760h0m0s"},
		{"service_addresses", vipService(MaxServiceAddresses), vipService(MaxServiceAddresses + 1),
			"Service/shop/s: spec.addresses: 9 entries, limit 8"},
		{"status_addresses", vipStatus(MaxServiceAddresses), vipStatus(MaxServiceAddresses + 1),
			"Service/shop/s: status.addresses: 9 entries, limit 8"},
		{"address_range_bits", object(KindMeshConfig, meta("", "default"), &MeshConfigSpec{ServiceAddressRange: "10.0.0.0/30"}),
			object(KindMeshConfig, meta("", "default"), &MeshConfigSpec{ServiceAddressRange: "10.0.0.0/31"}),
			`MeshConfig/default: spec.serviceAddressRange: "10.0.0.0/31" is longer than /30: no address is left besides network and broadcast`},
		{"sidecar_image", object(KindMeshConfig, meta("", "default"), &MeshConfigSpec{Sidecar: &SidecarConfig{Image: "r/" + strings.Repeat("a", MaxImageBytes-2)}}),
			object(KindMeshConfig, meta("", "default"), &MeshConfigSpec{Sidecar: &SidecarConfig{Image: "r/" + strings.Repeat("a", MaxImageBytes-1)}}),
			"MeshConfig/default: spec.sidecar.image: 513 bytes, limit 512"},
		{"certificate_ttl", object(KindMeshConfig, meta("", "default"), &MeshConfigSpec{CertificateTTL: "8760h"}), object(KindMeshConfig, meta("", "default"), &MeshConfigSpec{CertificateTTL: "8761h"}),
			"MeshConfig/default: spec.certificateTTL: 8761h exceeds the limit of 8760h0m0s"},
		{"crl_validity_max", object(KindMeshConfig, meta("", "default"), &MeshConfigSpec{CRLValidity: "168h"}), object(KindMeshConfig, meta("", "default"), &MeshConfigSpec{CRLValidity: "168h0m1s"}),
			"MeshConfig/default: spec.crlValidity: 168h0m1s exceeds the limit of 168h0m0s"},
		{"crl_validity_min", object(KindMeshConfig, meta("", "default"), &MeshConfigSpec{CRLValidity: "2s"}), object(KindMeshConfig, meta("", "default"), &MeshConfigSpec{CRLValidity: "1999ms"}),
			"MeshConfig/default: spec.crlValidity: 1999ms is under the limit of 2s"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ApplyDefaults(tc.atLimit)
			if err := Validate(tc.atLimit); err != nil {
				t.Errorf("at the limit: %v", err)
			}
			ApplyDefaults(tc.over)
			err := Validate(tc.over)
			if err == nil || err.Error() != tc.wantErr {
				t.Errorf("past the limit: error = %v\nwant %s", err, tc.wantErr)
			}
		})
	}
}

// vipService is a Service with n distinct spec.addresses.
func vipService(n int) *Object {
	s := &ServiceSpec{Ports: []ServicePort{{Name: "http", Port: 80}}}
	for i := range n {
		s.Addresses = append(s.Addresses, fmt.Sprintf("240.240.0.%d", i+1))
	}
	return object(KindService, meta("shop", "s"), s)
}

// vipStatus is a Service with n distinct status.addresses.
func vipStatus(n int) *Object {
	o := vipService(n)
	spec := o.Spec.(*ServiceSpec)
	o.Status = &Status{Addresses: spec.Addresses}
	spec.Addresses = nil
	return o
}

func outlierPolicy(f func(o *OutlierDetection)) *Object {
	od := &OutlierDetection{}
	f(od)
	return object(KindDestinationPolicy, meta("shop", "d"), &DestinationPolicySpec{Service: "s", OutlierDetection: od})
}

func ratePolicy(rps float64, burst int32) *Object {
	return object(KindDestinationPolicy, meta("shop", "d"), &DestinationPolicySpec{Service: "s", LocalRateLimit: &LocalRateLimit{RequestsPerSecond: rps, Burst: burst}})
}

func fill[T any](s []T, v T) {
	for i := range s {
		s[i] = v
	}
}

func headers(n int) map[string]StringMatch {
	m := map[string]StringMatch{}
	for i := range n {
		m[fmt.Sprintf("x-h%d", i)] = StringMatch{Present: ptr(true)}
	}
	return m
}

// dests returns n destinations whose weights sum to 100.
func dests(n int) []RouteDestination {
	l := make([]RouteDestination, n)
	for i := range l {
		l[i] = RouteDestination{Destination: Destination{Service: "reviews", Subset: fmt.Sprintf("s%d", i)}}
	}
	l[0].Weight = 100
	return l
}

func subsets(n int) []Subset {
	var l []Subset
	for i := range n {
		l = append(l, Subset{Name: fmt.Sprintf("v%d", i), Labels: map[string]string{"version": fmt.Sprintf("v%d", i)}})
	}
	return l
}

// Size and count bounds on whole inputs go through Decode.
func TestInputLimits(t *testing.T) {
	// padded returns a Service document of exactly n bytes (an annotation pads it).
	padded := func(n int) string {
		base := doc("Service", "{name: a, annotations: {pad: x}}", "{ports: [{name: http, port: 80}]}")
		return strings.Replace(base, "pad: x", "pad: "+strings.Repeat("x", n-len(base)+1), 1)
	}
	t.Run("object_bytes", func(t *testing.T) {
		// The JSON form of this document is longer than its YAML (quotes), so the
		// document at the limit is sized by its JSON form, the larger of the two.
		small := padded(1000)
		j, err := yaml.YAMLToJSON([]byte(small))
		if err != nil {
			t.Fatal(err)
		}
		atLimit := padded(MaxObjectBytes - (len(j) - len(small)))
		if j, _ := yaml.YAMLToJSON([]byte(atLimit)); len(j) != MaxObjectBytes {
			t.Fatalf("test setup: JSON form is %d bytes", len(j))
		}
		if _, err := Decode([]byte(atLimit), "t.yaml"); err != nil {
			t.Errorf("at the limit: %v", err)
		}
		_, err = Decode([]byte(svcA+"---\n"+padded(MaxObjectBytes+1)), "t.yaml")
		if want := "t.yaml: document 2: object is 1048577 bytes, limit 1048576"; err == nil || err.Error() != want {
			t.Errorf("past the limit: error = %v, want %s", err, want)
		}
	})
	t.Run("object_json_bytes_after_alias_expansion", func(t *testing.T) {
		big := strings.Repeat("x", MaxObjectBytes/3)
		in := doc("Service", "{name: a, annotations: {a: &p "+big+", b: *p, c: *p}}", "{ports: [{name: http, port: 80}]}")
		_, err := Decode([]byte(in), "t.yaml")
		if err == nil || !strings.HasPrefix(err.Error(), "t.yaml: document 1: object is ") || !strings.HasSuffix(err.Error(), " bytes as JSON, limit 1048576") {
			t.Errorf("error = %v, want the JSON size limit", err)
		}
	})
	t.Run("json_object_bytes", func(t *testing.T) {
		_, err := DecodeJSONObject(make([]byte, MaxObjectBytes+1))
		if want := "request body: object is 1048577 bytes, limit 1048576"; err == nil || err.Error() != want {
			t.Errorf("error = %v, want %s", err, want)
		}
	})
	t.Run("input_bytes", func(t *testing.T) {
		_, err := Decode(make([]byte, MaxInputBytes+1), "big.yaml")
		if want := "big.yaml: input is 33554433 bytes, limit 33554432"; err == nil || err.Error() != want {
			t.Errorf("error = %v, want %s", err, want)
		}
	})
	t.Run("objects_per_input", func(t *testing.T) {
		// A JSON list keeps this fast; the count is the same for YAML documents.
		list := func(n int) []byte {
			var b strings.Builder
			b.WriteString("[")
			for i := range n {
				if i > 0 {
					b.WriteString(",")
				}
				fmt.Fprintf(&b, `{"apiVersion":"mesh.weft.dev/v1alpha1","kind":"Workload","metadata":{"name":"w%d"},"spec":{"address":"10.0.0.1"}}`, i)
			}
			b.WriteString("]")
			return []byte(b.String())
		}
		objs, err := Decode(list(MaxObjectsPerInput), "many.json")
		if err != nil || len(objs) != MaxObjectsPerInput {
			t.Fatalf("at the limit: %d objects, %v", len(objs), err)
		}
		_, err = Decode(list(MaxObjectsPerInput+1), "many.json")
		if want := "input: 10001 objects, limit 10000"; err == nil || err.Error() != want {
			t.Errorf("past the limit: error = %v, want %s", err, want)
		}
	})
	t.Run("nesting_depth", func(t *testing.T) {
		nest := func(n int) string { return strings.Repeat("[", n) + strings.Repeat("]", n) }
		// The object itself is level 0, so MaxNestingDepth brackets inside it parse.
		_, err := DecodeJSONObject([]byte(`{"x":` + nest(MaxNestingDepth) + `}`))
		if want := "request body: kind: required"; err == nil || err.Error() != want {
			t.Errorf("at the limit: error = %v, want %s", err, want)
		}
		_, err = DecodeJSONObject([]byte(`{"x":` + nest(MaxNestingDepth+1) + `}`))
		if want := "request body: invalid JSON: x" + strings.Repeat("[0]", MaxNestingDepth) + ": nested deeper than 32 levels"; err == nil || err.Error() != want {
			t.Errorf("past the limit: error = %v\nwant %s", err, want)
		}
	})
}
