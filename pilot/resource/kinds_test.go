package resource

import (
	"strings"
	"testing"
)

const notLabel = `is not a DNS-1123 label (lower-case letters, digits and '-', starting and ending with a letter or digit)`

func TestService(t *testing.T) {
	svc := func(spec string) string { return doc("Service", "{name: s, namespace: shop}", spec) }
	runDecodeCases(t, []decodeCase{
		{
			name: "defaults",
			yaml: doc("Service", "{name: reviews}", "{selector: {app: reviews}, ports: [{name: http, port: 9080}]}"),
			want: object(KindService, meta("default", "reviews"), &ServiceSpec{
				Selector: map[string]string{"app": "reviews"},
				Ports:    []ServicePort{{Name: "http", Port: 9080, TargetPort: 9080, Protocol: "HTTP"}},
			}),
		},
		{
			name: "explicit_fields",
			yaml: svc("{ports: [{name: grpc, port: 9090, targetPort: 19090, protocol: GRPC}, {name: tcp, port: 1, targetPort: 65535, protocol: TCP}]}"),
			want: object(KindService, meta("shop", "s"), &ServiceSpec{Ports: []ServicePort{
				{Name: "grpc", Port: 9090, TargetPort: 19090, Protocol: "GRPC"},
				{Name: "tcp", Port: 1, TargetPort: 65535, Protocol: "TCP"},
			}}),
		},
		{
			name:    "no_ports",
			yaml:    svc("{ports: []}"),
			wantErr: []string{"Service/shop/s: spec.ports: at least one entry required"},
		},
		{
			name: "bad_ports",
			yaml: svc("{ports: [{name: http, port: 0}, {name: http, port: 70000, targetPort: -1, protocol: UDP}, {port: 80}, {name: Admin, port: 81}]}"),
			wantErr: []string{
				"Service/shop/s: spec.ports[0].port: port 0 out of range 1..65535",
				`Service/shop/s: spec.ports[1].name: duplicate port name "http"`,
				"Service/shop/s: spec.ports[1].port: port 70000 out of range 1..65535",
				"Service/shop/s: spec.ports[1].targetPort: port -1 out of range 1..65535",
				`Service/shop/s: spec.ports[1].protocol: "UDP" is not one of HTTP, HTTP2, GRPC, TCP`,
				"Service/shop/s: spec.ports[2].name: required",
				`Service/shop/s: spec.ports[3].name: "Admin" ` + notLabel,
			},
		},
		{
			name: "addresses",
			yaml: svc("{ports: [{name: tcp, port: 5432, protocol: TCP}], addresses: [240.240.0.10, 10.0.0.1, 'fd00::10']}"),
			want: object(KindService, meta("shop", "s"), &ServiceSpec{
				Ports:     []ServicePort{{Name: "tcp", Port: 5432, TargetPort: 5432, Protocol: "TCP"}},
				Addresses: []string{"240.240.0.10", "10.0.0.1", "fd00::10"},
			}),
		},
		{
			name: "bad_addresses",
			yaml: svc("{ports: [{name: http, port: 80}], addresses: [240.240.0.10, 240.240.0.10, nope, '0.0.0.0', 224.0.0.1, 127.0.0.2, 'FD00::1', '::ffff:10.0.0.1']}"),
			wantErr: []string{
				"Service/shop/s: spec.addresses[1]: duplicate address 240.240.0.10",
				`Service/shop/s: spec.addresses[2]: "nope" is not an IPv4 or IPv6 literal`,
				`Service/shop/s: spec.addresses[3]: "0.0.0.0" is not a unicast address`,
				`Service/shop/s: spec.addresses[4]: "224.0.0.1" is not a unicast address`,
				`Service/shop/s: spec.addresses[5]: "127.0.0.2" is a loopback address, which is never intercepted`,
				`Service/shop/s: spec.addresses[6]: "FD00::1" is not in canonical form: write it as fd00::1`,
				`Service/shop/s: spec.addresses[7]: "::ffff:10.0.0.1" is an IPv4-mapped IPv6 address: write it as 10.0.0.1`,
			},
		},
		{
			name:    "zoned_address",
			yaml:    svc("{ports: [{name: http, port: 80}], addresses: ['fe80::1%eth0']}"),
			wantErr: []string{`Service/shop/s: spec.addresses[0]: "fe80::1%eth0" is not an IPv4 or IPv6 literal`},
		},
		{
			name:    "status_refused",
			yaml:    svc("{ports: [{name: http, port: 80}]}") + "status: {addresses: [240.240.0.1]}\n",
			wantErr: []string{"Service/shop/s: status: status is set by pilot: remove it (a Service's VIPs go in spec.addresses)"},
		},
		{
			name: "status_null_is_absent",
			yaml: svc("{ports: [{name: http, port: 80}]}") + "status: null\n",
			want: object(KindService, meta("shop", "s"), &ServiceSpec{Ports: []ServicePort{{Name: "http", Port: 80, TargetPort: 80, Protocol: "HTTP"}}}),
		},
		{
			name:    "duplicate_port_number",
			yaml:    svc("{ports: [{name: a, port: 80}, {name: b, port: 80}]}"),
			wantErr: []string{"Service/shop/s: spec.ports[1].port: duplicate port 80"},
		},
		{
			name: "shape_errors_all_reported",
			yaml: svc(`{selectr: {app: x}, ports: [{name: http, port: "80", Protocol: HTTP}, {name: 7, port: 1.5, targetPort: 99999999999}], selector: [a]}`),
			wantErr: []string{
				"Service/shop/s: spec.ports[0].Protocol: unknown field",
				"Service/shop/s: spec.ports[0].port: expected an integer, got string",
				"Service/shop/s: spec.ports[1].name: expected a string, got number 7",
				"Service/shop/s: spec.ports[1].port: expected an integer, got number 1.5",
				"Service/shop/s: spec.ports[1].targetPort: integer 99999999999 out of range",
				"Service/shop/s: spec.selector: expected a map, got list",
				"Service/shop/s: spec.selectr: unknown field",
			},
		},
		{
			name: "bad_selector",
			yaml: svc("{selector: {-bad: x, app: 'a b', example.com/ok: v, Bad_Prefix/x: v}, ports: [{name: http, port: 80}]}"),
			wantErr: []string{
				"Service/shop/s: spec.selector[-bad]: invalid key: must be [prefix/]name with a DNS-1123 subdomain prefix and a name of at most 63 letters, digits, '-', '_' or '.', starting and ending with a letter or digit",
				"Service/shop/s: spec.selector[Bad_Prefix/x]: invalid key: must be [prefix/]name with a DNS-1123 subdomain prefix and a name of at most 63 letters, digits, '-', '_' or '.', starting and ending with a letter or digit",
				`Service/shop/s: spec.selector[app]: invalid value "a b": at most 63 letters, digits, '-', '_' or '.', starting and ending with a letter or digit`,
			},
		},
		{
			name: "bad_metadata",
			yaml: "apiVersion: v1\nkind: Service\nmetadata: {name: Reviews, namespace: my_ns, labels: {app: 'x y'}, generation: -1}\nspec: {ports: [{name: http, port: 80}]}\n",
			wantErr: []string{
				`Service/my_ns/Reviews: apiVersion: must be mesh.weft.dev/v1alpha1, got "v1"`,
				`Service/my_ns/Reviews: metadata.name: "Reviews" ` + notLabel,
				`Service/my_ns/Reviews: metadata.namespace: "my_ns" ` + notLabel,
				`Service/my_ns/Reviews: metadata.labels[app]: invalid value "x y": at most 63 letters, digits, '-', '_' or '.', starting and ending with a letter or digit`,
				"Service/my_ns/Reviews: metadata.generation: must not be negative, got -1",
			},
		},
		{
			name:    "name_too_long",
			yaml:    doc("Service", "{name: "+strings.Repeat("a", 64)+"}", "{ports: [{name: http, port: 80}]}"),
			wantErr: []string{"Service/default/" + strings.Repeat("a", 64) + `: metadata.name: "` + strings.Repeat("a", 64) + `" is 64 characters, limit 63`},
		},
		{
			name: "unknown_top_level_and_metadata_fields",
			yaml: doc("Service", "{name: s, uid: x}", "{ports: [{name: http, port: 80}]}") + "status: {}\nextra: 1\n",
			wantErr: []string{
				"Service/default/s: extra: unknown field",
				"Service/default/s: metadata.uid: unknown field",
				"Service/default/s: status: " + ErrStatusSetByPilot,
			},
		},
		{
			name:    "missing_spec",
			yaml:    "apiVersion: mesh.weft.dev/v1alpha1\nkind: Service\nmetadata: {name: s}\n",
			wantErr: []string{"Service/default/s: spec: required"},
		},
	})
}

func TestWorkload(t *testing.T) {
	wl := func(spec string) string { return doc("Workload", "{name: w, namespace: shop}", spec) }
	runDecodeCases(t, []decodeCase{
		{
			name: "defaults",
			yaml: wl("{address: 127.0.0.21}"),
			want: object(KindWorkload, meta("shop", "w"), &WorkloadSpec{Address: "127.0.0.21", ServiceAccount: "default", Weight: 1}),
		},
		{
			name: "all_fields_ipv6",
			yaml: wl("{address: 'fd00::1', serviceAccount: reviews.v1, locality: eu-west/eu-west-1a/rack1, weight: 128, ports: {http: 9080}}"),
			want: object(KindWorkload, meta("shop", "w"), &WorkloadSpec{Address: "fd00::1", ServiceAccount: "reviews.v1", Locality: "eu-west/eu-west-1a/rack1", Weight: 128, Ports: map[string]int32{"http": 9080}}),
		},
		{
			name:    "missing_address",
			yaml:    wl("{}"),
			wantErr: []string{"Workload/shop/w: spec.address: required"},
		},
		{
			name: "bad_values",
			yaml: wl("{address: 10.0.0, serviceAccount: Bad_SA, locality: a/b/c/d, weight: 129, ports: {HTTP: 80, grpc: 0}}"),
			wantErr: []string{
				`Workload/shop/w: spec.address: "10.0.0" is not an IPv4 or IPv6 literal`,
				`Workload/shop/w: spec.serviceAccount: "Bad_SA" is not a DNS-1123 subdomain`,
				`Workload/shop/w: spec.locality: "a/b/c/d" must be region[/zone[/subzone]], each part 1..63 letters, digits, '-', '_' or '.'`,
				"Workload/shop/w: spec.weight: 129 out of range 1..128",
				`Workload/shop/w: spec.ports[HTTP]: port name "HTTP" ` + notLabel,
				"Workload/shop/w: spec.ports[grpc]: port 0 out of range 1..65535",
			},
		},
		{
			name: "unicast_only",
			yaml: wl("{address: 0.0.0.0, locality: a//b, weight: -1}"),
			wantErr: []string{
				`Workload/shop/w: spec.address: "0.0.0.0" is not a unicast address`,
				`Workload/shop/w: spec.locality: "a//b" must be region[/zone[/subzone]], each part 1..63 letters, digits, '-', '_' or '.'`,
				"Workload/shop/w: spec.weight: -1 out of range 1..128",
			},
		},
		{
			name:    "zone_rejected",
			yaml:    wl("{address: 'fe80::1%eth0'}"),
			wantErr: []string{`Workload/shop/w: spec.address: "fe80::1%eth0" is not an IPv4 or IPv6 literal`},
		},
	})
}

func TestRoute(t *testing.T) {
	rt := func(spec string) string { return doc("Route", "{name: r, namespace: shop}", spec) }
	const dest = "route: [{destination: {service: reviews}}]"
	runDecodeCases(t, []decodeCase{
		{
			name: "api_example",
			yaml: rt(`{hosts: [reviews], http: [{name: jason-to-v2, match: [{path: {prefix: /}, headers: {end-user: {exact: jason}, x-canary: {present: true}}, method: GET}],
  route: [{destination: {service: reviews, subset: v2, port: 9080}, weight: 100}], timeout: 2s,
  retries: {attempts: 3, perTryTimeout: 500ms, retryOn: [5xx, gateway-error, reset, connect-failure]},
  fallback: [{destination: {service: reviews-backup, port: 9080}}]}]}`),
			want: object(KindRoute, meta("shop", "r"), &RouteSpec{
				Hosts: []string{"reviews"},
				HTTP: []HTTPRoute{{
					Name: "jason-to-v2",
					Match: []HTTPMatch{{
						Path:    &StringMatch{Prefix: ptr("/")},
						Headers: map[string]StringMatch{"end-user": {Exact: ptr("jason")}, "x-canary": {Present: ptr(true)}},
						Method:  "GET",
					}},
					Route:    []RouteDestination{{Destination: Destination{Service: "reviews", Subset: "v2", Port: 9080}, Weight: 100}},
					Timeout:  "2s",
					Retries:  &RetryPolicy{Attempts: 3, PerTryTimeout: "500ms", RetryOn: []string{"5xx", "gateway-error", "reset", "connect-failure"}},
					Fallback: []FallbackDestination{{Destination: Destination{Service: "reviews-backup", Port: 9080}}},
				}},
			}),
		},
		{
			name: "single_destination_weight_defaults_to_100",
			yaml: rt("{hosts: [reviews.shop], http: [{" + dest + "}]}"),
			want: object(KindRoute, meta("shop", "r"), &RouteSpec{
				Hosts: []string{"reviews.shop"},
				HTTP:  []HTTPRoute{{Route: []RouteDestination{{Destination: Destination{Service: "reviews"}, Weight: 100}}}},
			}),
		},
		{
			name:    "issue_example_regex",
			yaml:    doc("Route", "{name: cart, namespace: shop}", `{hosts: [cart], http: [{match: [{path: {prefix: /}}, {path: {regex: "/cart/(\\d+"}}], route: [{destination: {service: cart}}]}]}`),
			wantErr: []string{"Route/shop/cart: spec.http[0].match[1].path.regex: invalid RE2: missing closing )"},
		},
		{
			name: "regex_not_re2",
			yaml: rt(`{hosts: [reviews], http: [{match: [{path: {regex: "(a)\\1"}}, {headers: {x: {regex: "(?=x)"}}}], ` + dest + `}]}`),
			wantErr: []string{
				`Route/shop/r: spec.http[0].match[0].path.regex: invalid RE2: invalid escape sequence`,
				`Route/shop/r: spec.http[0].match[1].headers[x].regex: invalid RE2: invalid or unsupported Perl syntax`,
			},
		},
		{
			name: "bad_matches",
			yaml: rt(`{hosts: [reviews], http: [{match: [{path: {exact: /a, prefix: /b}}, {path: {prefix: api}}, {path: {present: true}}, {path: {}},
  {headers: {X-Upper: {exact: a}, ok: {present: false}, two: {exact: a, regex: b}}, method: FETCH}], ` + dest + `}]}`),
			wantErr: []string{
				"Route/shop/r: spec.http[0].match[0].path: exactly one of exact, prefix, regex required",
				`Route/shop/r: spec.http[0].match[1].path: "api" must start with "/"`,
				"Route/shop/r: spec.http[0].match[2].path.present: only allowed in header matches",
				"Route/shop/r: spec.http[0].match[3].path: exactly one of exact, prefix, regex required",
				"Route/shop/r: spec.http[0].match[4].headers[X-Upper]: invalid header name: want lower-case letters, digits and !#$%&'*+-.^_`|~",
				"Route/shop/r: spec.http[0].match[4].headers[ok].present: must be true (omit the header match instead)",
				"Route/shop/r: spec.http[0].match[4].headers[two]: exactly one of exact, prefix, regex, present required",
				`Route/shop/r: spec.http[0].match[4].method: "FETCH" is not one of GET, HEAD, POST, PUT, DELETE, CONNECT, OPTIONS, TRACE, PATCH`,
			},
		},
		{
			name: "bad_weights",
			yaml: rt(`{hosts: [reviews], http: [
  {route: [{destination: {service: reviews, subset: v1}, weight: 80}, {destination: {service: reviews, subset: v2}, weight: 10}]},
  {route: [{destination: {service: reviews, subset: v1}}, {destination: {service: reviews, subset: v2}}]},
  {route: [{destination: {service: reviews}, weight: 150}, {destination: {service: reviews}, weight: -50}]}]}`),
			wantErr: []string{
				"Route/shop/r: spec.http[0].route: weights sum to 90, must be 100",
				"Route/shop/r: spec.http[1].route: weights sum to 0, must be 100",
				"Route/shop/r: spec.http[2].route[0].weight: 150 out of range 0..100",
				"Route/shop/r: spec.http[2].route[1].weight: -50 out of range 0..100",
			},
		},
		{
			name: "bad_hosts_and_destinations",
			yaml: rt(`{hosts: [Reviews, a.b.c, ok, ok], http: [{route: [{destination: {service: "", subset: V1, port: 70000}}], fallback: [{destination: {service: x_y}}]}]}`),
			wantErr: []string{
				`Route/shop/r: spec.hosts[0]: "Reviews" is not a Service name: want <service> or <service>.<namespace>, DNS-1123 labels`,
				`Route/shop/r: spec.hosts[1]: "a.b.c" is not a Service name: want <service> or <service>.<namespace>, DNS-1123 labels`,
				`Route/shop/r: spec.hosts[3]: duplicate host "ok"`,
				"Route/shop/r: spec.http[0].route[0].destination.service: required",
				`Route/shop/r: spec.http[0].route[0].destination.subset: "V1" ` + notLabel,
				"Route/shop/r: spec.http[0].route[0].destination.port: port 70000 out of range 1..65535",
				`Route/shop/r: spec.http[0].fallback[0].destination.service: "x_y" is not a Service name: want <service> or <service>.<namespace>, DNS-1123 labels`,
			},
		},
		{
			name: "required_lists",
			yaml: rt("{hosts: [], http: []}"),
			wantErr: []string{
				"Route/shop/r: spec.hosts: at least one entry required",
				"Route/shop/r: spec.http: at least one entry required",
			},
		},
		{
			name:    "rule_without_route",
			yaml:    rt("{hosts: [reviews], http: [{name: a}]}"),
			wantErr: []string{"Route/shop/r: spec.http[0].route: at least one entry required"},
		},
		{
			name: "timeouts_and_retries",
			yaml: rt(`{hosts: [reviews], http: [
  {name: a, ` + dest + `, timeout: 2x, retries: {attempts: 0, perTryTimeout: -1s, retryOn: [5xx, bogus, 5xx]}},
  {name: a, ` + dest + `, timeout: 1s, retries: {attempts: 11, perTryTimeout: 2s}},
  {name: B, ` + dest + `, timeout: 0s}]}`),
			wantErr: []string{
				`Route/shop/r: spec.http[0].timeout: invalid duration "2x"`,
				"Route/shop/r: spec.http[0].retries.attempts: 0 out of range 1..10",
				`Route/shop/r: spec.http[0].retries.perTryTimeout: must be positive, got "-1s"`,
				`Route/shop/r: spec.http[0].retries.retryOn[1]: "bogus" is not one of 5xx, gateway-error, reset, connect-failure, retriable-4xx, refused-stream, cancelled, deadline-exceeded, unavailable, resource-exhausted, internal`,
				`Route/shop/r: spec.http[0].retries.retryOn[2]: duplicate "5xx"`,
				`Route/shop/r: spec.http[1].name: duplicate rule name "a"`,
				"Route/shop/r: spec.http[1].retries.attempts: 11 out of range 1..10",
				"Route/shop/r: spec.http[1].retries.perTryTimeout: 2s exceeds the rule timeout 1s",
				`Route/shop/r: spec.http[2].name: "B" ` + notLabel,
				`Route/shop/r: spec.http[2].timeout: must be positive, got "0s"`,
			},
		},
		{
			name: "retry_backoff_and_grpc_names",
			yaml: rt(`{hosts: [reviews], http: [
  {name: a, ` + dest + `, retries: {attempts: 2, retryOn: [cancelled, deadline-exceeded, unavailable, resource-exhausted, internal, Unavailable], backoff: {maxInterval: 1s}}},
  {name: b, ` + dest + `, retries: {attempts: 2, backoff: {baseInterval: 100ms, maxInterval: 99ms}}},
  {name: c, ` + dest + `, retries: {attempts: 2, backoff: {baseInterval: 0s, maxInterval: soon}}}]}`),
			wantErr: []string{
				`Route/shop/r: spec.http[0].retries.retryOn[5]: "Unavailable" is not one of 5xx, gateway-error, reset, connect-failure, retriable-4xx, refused-stream, cancelled, deadline-exceeded, unavailable, resource-exhausted, internal`,
				"Route/shop/r: spec.http[0].retries.backoff.baseInterval: required",
				"Route/shop/r: spec.http[1].retries.backoff.maxInterval: 99ms is below baseInterval 100ms",
				`Route/shop/r: spec.http[2].retries.backoff.baseInterval: must be positive, got "0s"`,
				`Route/shop/r: spec.http[2].retries.backoff.maxInterval: invalid duration "soon"`,
			},
		},
		{
			name:    "duration_wrong_type",
			yaml:    rt("{hosts: [reviews], http: [{" + dest + ", timeout: 5}]}"),
			wantErr: []string{`Route/shop/r: spec.http[0].timeout: expected a duration string such as "5m", got number 5`},
		},
	})
}

func TestDestinationPolicy(t *testing.T) {
	dp := func(spec string) string { return doc("DestinationPolicy", "{name: d, namespace: shop}", spec) }
	runDecodeCases(t, []decodeCase{
		{
			name: "defaults",
			yaml: dp("{service: reviews}"),
			want: object(KindDestinationPolicy, meta("shop", "d"), &DestinationPolicySpec{Service: "reviews", LoadBalancer: "ROUND_ROBIN"}),
		},
		{
			name: "api_example",
			yaml: dp(`{service: reviews.shop, subsets: [{name: v1, labels: {version: v1}}], loadBalancer: RING_HASH,
  connectionPool: {maxConnections: 100, maxPendingRequests: 64, maxRequests: 1000, maxRetries: 3, retryBudget: {percent: 20, minConcurrency: 3}, connectTimeout: 1s},
  outlierDetection: {consecutive5xx: 5, consecutiveGatewayErrors: 3, consecutiveLocalOriginFailures: 5, splitExternalLocalOriginErrors: true, successRate: {minHosts: 5, requestVolume: 100, stdevFactor: 1.9},
    failurePercentage: {threshold: 85, minHosts: 5, requestVolume: 50}, interval: 10s, baseEjectionTime: 30s, maxEjectionTime: 300s, maxEjectionTimeJitter: 1s, maxEjectionPercent: 10, minHealthPercent: 50},
  localRateLimit: {requestsPerSecond: 100, burst: 200, dryRun: true}}`),
			want: object(KindDestinationPolicy, meta("shop", "d"), &DestinationPolicySpec{
				Service:        "reviews.shop",
				Subsets:        []Subset{{Name: "v1", Labels: map[string]string{"version": "v1"}}},
				LoadBalancer:   "RING_HASH",
				ConnectionPool: &ConnectionPool{MaxConnections: 100, MaxPendingRequests: 64, MaxRequests: 1000, MaxRetries: 3, RetryBudget: &RetryBudget{Percent: 20, MinConcurrency: 3}, ConnectTimeout: "1s"},
				OutlierDetection: &OutlierDetection{
					Consecutive5xx: 5, ConsecutiveGatewayErrors: 3, ConsecutiveLocalOriginFailures: 5, SplitExternalLocalOriginErrors: ptr(true),
					SuccessRate:       &SuccessRate{MinHosts: 5, RequestVolume: 100, StdevFactor: 1.9},
					FailurePercentage: &FailurePercentage{Threshold: 85, MinHosts: 5, RequestVolume: 50},
					Interval:          "10s", BaseEjectionTime: "30s", MaxEjectionTime: "300s", MaxEjectionTimeJitter: "1s", MaxEjectionPercent: 10, MinHealthPercent: ptr(50.0),
				},
				LocalRateLimit: &LocalRateLimit{RequestsPerSecond: 100, Burst: 200, DryRun: true},
			}),
		},
		{
			name: "bad_values",
			yaml: dp(`{subsets: [{name: v1, labels: {}}, {name: v1, labels: {version: v1}}], loadBalancer: LEAST_CONN,
  connectionPool: {maxConnections: -1, maxPendingRequests: -2, maxRequests: -3, maxRetries: -4, retryBudget: {percent: 120, minConcurrency: -5}, connectTimeout: 0s},
  outlierDetection: {consecutive5xx: -1, consecutiveLocalOriginFailures: 2, splitExternalLocalOriginErrors: false, successRate: {stdevFactor: -1}, failurePercentage: {threshold: 101}, interval: soon, baseEjectionTime: 30s, maxEjectionTime: 10s, maxEjectionTimeJitter: -1s, maxEjectionPercent: -1, minHealthPercent: 100.5},
  localRateLimit: {requestsPerSecond: 0, burst: -1}}`),
			wantErr: []string{
				"DestinationPolicy/shop/d: spec.service: required",
				"DestinationPolicy/shop/d: spec.subsets[0].labels: at least one label required",
				`DestinationPolicy/shop/d: spec.subsets[1].name: duplicate subset "v1"`,
				`DestinationPolicy/shop/d: spec.loadBalancer: "LEAST_CONN" is not one of ROUND_ROBIN, LEAST_REQUEST, RANDOM, RING_HASH`,
				"DestinationPolicy/shop/d: spec.connectionPool.maxConnections: must not be negative, got -1",
				"DestinationPolicy/shop/d: spec.connectionPool.maxPendingRequests: must not be negative, got -2",
				"DestinationPolicy/shop/d: spec.connectionPool.maxRequests: must not be negative, got -3",
				"DestinationPolicy/shop/d: spec.connectionPool.maxRetries: must not be negative, got -4",
				"DestinationPolicy/shop/d: spec.connectionPool.retryBudget.percent: 120 out of range 0..100",
				"DestinationPolicy/shop/d: spec.connectionPool.retryBudget.minConcurrency: must not be negative, got -5",
				`DestinationPolicy/shop/d: spec.connectionPool.connectTimeout: must be positive, got "0s"`,
				"DestinationPolicy/shop/d: spec.outlierDetection.consecutive5xx: must not be negative, got -1",
				"DestinationPolicy/shop/d: spec.outlierDetection.splitExternalLocalOriginErrors: false, but consecutiveLocalOriginFailures is set: that detector needs local-origin failures counted apart",
				"DestinationPolicy/shop/d: spec.outlierDetection.successRate.stdevFactor: must not be negative, got -1",
				"DestinationPolicy/shop/d: spec.outlierDetection.failurePercentage.threshold: 101 out of range 0..100",
				`DestinationPolicy/shop/d: spec.outlierDetection.interval: invalid duration "soon"`,
				"DestinationPolicy/shop/d: spec.outlierDetection.maxEjectionTime: 10s is less than baseEjectionTime 30s",
				`DestinationPolicy/shop/d: spec.outlierDetection.maxEjectionTimeJitter: must be positive, got "-1s"`,
				"DestinationPolicy/shop/d: spec.outlierDetection.maxEjectionPercent: -1 out of range 0..100",
				"DestinationPolicy/shop/d: spec.outlierDetection.minHealthPercent: 100.5 out of range 0..100",
				"DestinationPolicy/shop/d: spec.localRateLimit.requestsPerSecond: must be positive, got 0",
				"DestinationPolicy/shop/d: spec.localRateLimit.burst: must not be negative, got -1",
			},
		},
		{
			name:    "bool_wrong_type",
			yaml:    dp(`{service: reviews, outlierDetection: {splitExternalLocalOriginErrors: 1}, localRateLimit: {requestsPerSecond: 1, dryRun: "yes"}}`),
			wantErr: []string{"DestinationPolicy/shop/d: spec.localRateLimit.dryRun: expected true or false, got string", "DestinationPolicy/shop/d: spec.outlierDetection.splitExternalLocalOriginErrors: expected true or false, got number 1"},
		},
		{
			name: "split_without_local_origin_detector",
			yaml: dp(`{service: reviews, outlierDetection: {splitExternalLocalOriginErrors: true, consecutive5xx: 3}}`),
			want: object(KindDestinationPolicy, meta("shop", "d"), &DestinationPolicySpec{Service: "reviews", LoadBalancer: "ROUND_ROBIN",
				OutlierDetection: &OutlierDetection{Consecutive5xx: 3, SplitExternalLocalOriginErrors: ptr(true)}}),
		},
	})
}

func TestPeerAuthentication(t *testing.T) {
	pa := func(spec string) string { return doc("PeerAuthentication", "{name: default, namespace: shop}", spec) }
	runDecodeCases(t, []decodeCase{
		{
			name: "namespace_wide",
			yaml: pa("{mtls: PERMISSIVE}"),
			want: object(KindPeerAuthentication, meta("shop", "default"), &PeerAuthenticationSpec{MTLS: "PERMISSIVE"}),
		},
		{
			name: "selector",
			yaml: pa("{selector: {app: reviews}, mtls: STRICT}"),
			want: object(KindPeerAuthentication, meta("shop", "default"), &PeerAuthenticationSpec{Selector: map[string]string{"app": "reviews"}, MTLS: "STRICT"}),
		},
		{name: "mtls_required", yaml: pa("{}"), wantErr: []string{"PeerAuthentication/shop/default: spec.mtls: required"}},
		{name: "mtls_enum", yaml: pa("{mtls: 'ON'}"), wantErr: []string{`PeerAuthentication/shop/default: spec.mtls: "ON" is not one of STRICT, PERMISSIVE, DISABLE`}},
		{name: "mtls_yaml_bool", yaml: pa("{mtls: on}"), wantErr: []string{"PeerAuthentication/shop/default: spec.mtls: expected a string, got boolean"}},
	})
}

func TestAuthorizationPolicy(t *testing.T) {
	az := func(spec string) string { return doc("AuthorizationPolicy", "{name: a, namespace: shop}", spec) }
	runDecodeCases(t, []decodeCase{
		{
			name: "defaults",
			yaml: az(`{rules: [{from: [{principals: ["spiffe://cluster.local/ns/shop/sa/frontend", "*"], namespaces: [shop, "*"]}], to: [{methods: [GET, "*"], paths: ["/reviews/*", "*.png", "*"], ports: [9080]}]}]}`),
			want: object(KindAuthorizationPolicy, meta("shop", "a"), &AuthorizationPolicySpec{
				Action: "ALLOW",
				Rules: []AuthzRule{{
					From: []AuthzSource{{Principals: []string{"spiffe://cluster.local/ns/shop/sa/frontend", "*"}, Namespaces: []string{"shop", "*"}}},
					To:   []AuthzOperation{{Methods: []string{"GET", "*"}, Paths: []string{"/reviews/*", "*.png", "*"}, Ports: []int32{9080}}},
				}},
			}),
		},
		{
			name: "deny_dry_run",
			yaml: az("{selector: {app: reviews}, action: DENY, dryRun: true}"),
			want: object(KindAuthorizationPolicy, meta("shop", "a"), &AuthorizationPolicySpec{Selector: map[string]string{"app": "reviews"}, Action: "DENY", DryRun: true}),
		},
		{
			name:    "bad_values",
			yaml:    az(`{action: LOG, dryRun: "yes", rules: [{from: [{principals: ["spiffe://a b", "*a*"], namespaces: [Shop]}], to: [{methods: [get], paths: [reviews, "/a*b"], ports: [0]}]}]}`),
			wantErr: []string{"AuthorizationPolicy/shop/a: spec.dryRun: expected true or false, got string"},
		},
		{
			name: "bad_rules",
			yaml: az(`{action: LOG, rules: [{from: [{principals: ["spiffe://a b", "*a*"], namespaces: [Shop]}], to: [{methods: [get], paths: [reviews, "/a*b"], ports: [0]}]}]}`),
			wantErr: []string{
				`AuthorizationPolicy/shop/a: spec.action: "LOG" is not one of ALLOW, DENY, AUDIT`,
				`AuthorizationPolicy/shop/a: spec.rules[0].from[0].principals[0]: "spiffe://a b" must be a SPIFFE ID or a pattern with "*" only as the first or last character`,
				`AuthorizationPolicy/shop/a: spec.rules[0].from[0].principals[1]: "*a*" must be a SPIFFE ID or a pattern with "*" only as the first or last character`,
				`AuthorizationPolicy/shop/a: spec.rules[0].from[0].namespaces[0]: "Shop" ` + notLabel,
				`AuthorizationPolicy/shop/a: spec.rules[0].to[0].methods[0]: "get" is not one of GET, HEAD, POST, PUT, DELETE, CONNECT, OPTIONS, TRACE, PATCH`,
				`AuthorizationPolicy/shop/a: spec.rules[0].to[0].paths[0]: "reviews" must be "*", start with "/", and use "*" only as the first or last character`,
				`AuthorizationPolicy/shop/a: spec.rules[0].to[0].paths[1]: "/a*b" must be "*", start with "/", and use "*" only as the first or last character`,
				"AuthorizationPolicy/shop/a: spec.rules[0].to[0].ports[0]: port 0 out of range 1..65535",
			},
		},
	})
}

func TestStalenessPolicy(t *testing.T) {
	sp := func(spec string) string { return doc("StalenessPolicy", "{name: s, namespace: shop}", spec) }
	runDecodeCases(t, []decodeCase{
		{
			name: "api_example",
			yaml: sp("{selector: {app: reviews}, rules: [{resource: routes, warnAfter: 5m, restrictAfter: 1h, expireAfter: 24h, onExpire: failClosed, jitter: 10}]}"),
			want: object(KindStalenessPolicy, meta("shop", "s"), &StalenessPolicySpec{
				Selector: map[string]string{"app": "reviews"},
				Rules:    []StalenessRule{{Resource: "routes", WarnAfter: "5m", RestrictAfter: "1h", ExpireAfter: "24h", OnExpire: "failClosed", Jitter: 10}},
			}),
		},
		{
			name: "defaults_per_class",
			yaml: sp("{rules: [{resource: listeners}, {resource: endpoints}, {resource: secrets}, {resource: revocation}, {resource: authorization, warnAfter: 10m}]}"),
			want: object(KindStalenessPolicy, meta("shop", "s"), &StalenessPolicySpec{Rules: []StalenessRule{
				{Resource: "listeners", WarnAfter: "5m", ExpireAfter: "24h", OnExpire: "failClosed"},
				{Resource: "endpoints", WarnAfter: "1m", OnExpire: "serveStale"},
				{Resource: "secrets", OnExpire: "failClosed"},
				{Resource: "revocation", OnExpire: "failClosed"},
				{Resource: "authorization", WarnAfter: "10m", ExpireAfter: "24h", OnExpire: "failClosed"},
			}}),
		},
		{name: "rules_required", yaml: sp("{}"), wantErr: []string{"StalenessPolicy/shop/s: spec.rules: at least one entry required"}},
		{
			name: "bad_rules",
			yaml: sp(`{rules: [{resource: pods}, {resource: routes, warnAfter: 2h, restrictAfter: 1h}, {resource: routes, warnAfter: 30h, onExpire: panic, jitter: 150},
  {resource: clusters, restrictAfter: forever, expireAfter: 1m}, {resource: endpoints, warnAfter: 90000h, onExpire: serveStale, jitter: 2.5}]}`),
			wantErr: []string{
				`StalenessPolicy/shop/s: spec.rules[0].resource: "pods" is not one of listeners, routes, clusters, endpoints, secrets, revocation, authorization`,
				`StalenessPolicy/shop/s: spec.rules[0].onExpire: required`,
				"StalenessPolicy/shop/s: spec.rules[1].warnAfter: 2h is after restrictAfter 1h",
				`StalenessPolicy/shop/s: spec.rules[2].resource: duplicate rule for "routes"`,
				"StalenessPolicy/shop/s: spec.rules[2].warnAfter: 30h is after expireAfter 24h",
				`StalenessPolicy/shop/s: spec.rules[2].onExpire: "panic" is not one of serveStale, failClosed, drop`,
				"StalenessPolicy/shop/s: spec.rules[2].jitter: 150 out of range 0..100",
				`StalenessPolicy/shop/s: spec.rules[3].restrictAfter: invalid duration "forever"`,
				"StalenessPolicy/shop/s: spec.rules[3].warnAfter: 5m is after expireAfter 1m",
				"StalenessPolicy/shop/s: spec.rules[4].warnAfter: 90000h exceeds the limit of 87600h0m0s",
				"StalenessPolicy/shop/s: spec.rules[4].jitter: 2.5 is not a whole percent",
			},
		},
	})
}

func TestOverride(t *testing.T) {
	ov := func(spec string) string { return doc("Override", "{name: o, namespace: shop}", spec) }
	runDecodeCases(t, []decodeCase{
		{
			name: "api_example",
			yaml: ov(`{ttl: 10m, reason: "scraper from tenant 42", action: DENY, match: {principals: ["spiffe://cluster.local/ns/t42/sa/bot"], paths: ["/reviews/*"], methods: [POST]}}`),
			want: object(KindOverride, meta("shop", "o"), &OverrideSpec{TTL: "10m", Reason: "scraper from tenant 42", Action: "DENY",
				Match: OverrideMatch{Principals: []string{"spiffe://cluster.local/ns/t42/sa/bot"}, Paths: []string{"/reviews/*"}, Methods: []string{"POST"}}}),
		},
		{
			name: "ttl_at_limit",
			yaml: ov("{ttl: 1h, action: ALLOW, match: {methods: [GET]}}"),
			want: object(KindOverride, meta("shop", "o"), &OverrideSpec{TTL: "1h", Action: "ALLOW", Match: OverrideMatch{Methods: []string{"GET"}}}),
		},
		{
			name: "required",
			yaml: ov("{match: {}}"),
			wantErr: []string{
				"Override/shop/o: spec.ttl: required",
				"Override/shop/o: spec.action: required",
				"Override/shop/o: spec.match: at least one of principals, paths, methods required",
			},
		},
		{
			name: "bad_values",
			yaml: ov("{ttl: 61m, action: LOG, reason: '" + strings.Repeat("r", MaxReasonBytes+1) + "', match: {paths: [x], methods: [get]}}"),
			wantErr: []string{
				"Override/shop/o: spec.ttl: 61m exceeds the limit of 1h0m0s",
				"Override/shop/o: spec.reason: 1025 bytes, limit 1024",
				`Override/shop/o: spec.action: "LOG" is not one of DENY, ALLOW`,
				`Override/shop/o: spec.match.paths[0]: "x" must be "*", start with "/", and use "*" only as the first or last character`,
				`Override/shop/o: spec.match.methods[0]: "get" is not one of GET, HEAD, POST, PUT, DELETE, CONNECT, OPTIONS, TRACE, PATCH`,
			},
		},
		{name: "ttl_zero", yaml: ov("{ttl: 0s, action: DENY, match: {paths: [/]}}"), wantErr: []string{`Override/shop/o: spec.ttl: must be positive, got "0s"`}},
	})
}

func TestMeshConfig(t *testing.T) {
	runDecodeCases(t, []decodeCase{
		{
			name: "defaults",
			yaml: doc("MeshConfig", "{name: default}", "{}"),
			want: object(KindMeshConfig, meta("", "default"), &MeshConfigSpec{TrustDomain: "cluster.local", DefaultMTLS: "STRICT", CertificateTTL: "24h",
				ServiceAddressRange: "240.240.0.0/16", OutboundTrafficPolicy: "ALLOW_ANY",
				Sidecar: &SidecarConfig{Image: "weft/sidecar:dev", CPU: "100m", Memory: "64Mi"}}),
		},
		{
			name: "explicit",
			yaml: doc("MeshConfig", "{name: default}", "{trustDomain: example.org, defaultMtls: PERMISSIVE, certificateTTL: 1h, "+
				"serviceAddressRange: 10.96.0.0/12, outboundTrafficPolicy: REGISTRY_ONLY, sidecar: {image: 'registry.example/weft/sidecar:v1@sha256:abc', cpu: '0.5', memory: 1Gi}}"),
			want: object(KindMeshConfig, meta("", "default"), &MeshConfigSpec{TrustDomain: "example.org", DefaultMTLS: "PERMISSIVE", CertificateTTL: "1h",
				ServiceAddressRange: "10.96.0.0/12", OutboundTrafficPolicy: "REGISTRY_ONLY",
				Sidecar: &SidecarConfig{Image: "registry.example/weft/sidecar:v1@sha256:abc", CPU: "0.5", Memory: "1Gi"}}),
		},
		{
			name: "sidecar_partial_defaults",
			yaml: doc("MeshConfig", "{name: default}", "{sidecar: {cpu: 250m}}"),
			want: object(KindMeshConfig, meta("", "default"), &MeshConfigSpec{TrustDomain: "cluster.local", DefaultMTLS: "STRICT", CertificateTTL: "24h",
				ServiceAddressRange: "240.240.0.0/16", OutboundTrafficPolicy: "ALLOW_ANY",
				Sidecar: &SidecarConfig{Image: "weft/sidecar:dev", CPU: "250m", Memory: "64Mi"}}),
		},
		{
			name:    "bad_interception_fields",
			yaml:    doc("MeshConfig", "{name: default}", "{serviceAddressRange: 240.240.0.1/16, outboundTrafficPolicy: DENY, sidecar: {image: 'a b', cpu: 100m, gpu: 1}}"),
			wantErr: []string{"MeshConfig/default: spec.sidecar.gpu: unknown field"},
		},
		{
			name: "bad_interception_values",
			yaml: doc("MeshConfig", "{name: default}", "{serviceAddressRange: 240.240.0.1/16, outboundTrafficPolicy: DENY, sidecar: {image: 'a b', cpu: 100x, memory: '-1'}}"),
			wantErr: []string{
				`MeshConfig/default: spec.serviceAddressRange: "240.240.0.1/16" is not a network address: did you mean 240.240.0.0/16?`,
				`MeshConfig/default: spec.outboundTrafficPolicy: "DENY" is not one of ALLOW_ANY, REGISTRY_ONLY`,
				`MeshConfig/default: spec.sidecar.image: "a b" is not an image reference ([registry/]name[:tag][@digest])`,
				`MeshConfig/default: spec.sidecar.cpu: "100x" is not a Kubernetes quantity such as 100m or 0.5`,
				`MeshConfig/default: spec.sidecar.memory: "-1" is not a Kubernetes quantity such as 64Mi or 1G`,
			},
		},
		{
			name:    "range_not_cidr",
			yaml:    doc("MeshConfig", "{name: default}", "{serviceAddressRange: 240.240.0.0}"),
			wantErr: []string{`MeshConfig/default: spec.serviceAddressRange: "240.240.0.0" is not a CIDR such as 240.240.0.0/16`},
		},
		{
			name:    "range_ipv6",
			yaml:    doc("MeshConfig", "{name: default}", "{serviceAddressRange: 'fd00::/64'}"),
			wantErr: []string{`MeshConfig/default: spec.serviceAddressRange: "fd00::/64" is not IPv4: only IPv4 ranges are allocated from (give IPv6 VIPs in a Service's spec.addresses)`},
		},
		{
			name: "bad_values",
			yaml: doc("MeshConfig", "{name: mesh, namespace: shop}", "{trustDomain: Cluster_Local, defaultMtls: 'OFF', certificateTTL: 9000h}"),
			wantErr: []string{
				"MeshConfig/shop/mesh: metadata.namespace: must be empty: MeshConfig is cluster-wide",
				`MeshConfig/shop/mesh: metadata.name: must be "default": there is one MeshConfig`,
				`MeshConfig/shop/mesh: spec.trustDomain: "Cluster_Local" is not a DNS-1123 subdomain`,
				`MeshConfig/shop/mesh: spec.defaultMtls: "OFF" is not one of STRICT, PERMISSIVE, DISABLE`,
				"MeshConfig/shop/mesh: spec.certificateTTL: 9000h exceeds the limit of 8760h0m0s",
			},
		},
	})
}

// Only a Service has a status, and its addresses are checked like spec's.
func TestValidateStatus(t *testing.T) {
	for _, tc := range []struct {
		name string
		o    *Object
		want string
	}{
		{"service", &Object{APIVersion: APIVersion, Kind: KindService, Metadata: meta("shop", "s"),
			Spec: &ServiceSpec{Ports: []ServicePort{{Name: "http", Port: 80}}}, Status: &Status{Addresses: []string{"240.240.0.1"}}}, ""},
		{"service bad address", &Object{APIVersion: APIVersion, Kind: KindService, Metadata: meta("shop", "s"),
			Spec: &ServiceSpec{Ports: []ServicePort{{Name: "http", Port: 80}}}, Status: &Status{Addresses: []string{"240.240.0.1", "x"}}},
			`Service/shop/s: status.addresses[1]: "x" is not an IPv4 or IPv6 literal`},
		{"route", &Object{APIVersion: APIVersion, Kind: KindRoute, Metadata: meta("shop", "r"),
			Spec: &RouteSpec{Hosts: []string{"s"}, HTTP: []HTTPRoute{{Route: []RouteDestination{{Destination: Destination{Service: "s"}}}}}}, Status: &Status{}},
			"Route/shop/r: status: must be empty: a Route has no status"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ApplyDefaults(tc.o)
			err := Validate(tc.o)
			switch {
			case tc.want == "" && err != nil:
				t.Fatalf("Validate: %v", err)
			case tc.want != "" && (err == nil || err.Error() != tc.want):
				t.Fatalf("Validate = %v, want %s", err, tc.want)
			}
		})
	}
}

func TestResolveKind(t *testing.T) {
	want := map[string]string{ // every kind's short name, as meshctl help documents them
		KindMeshConfig: "mc", KindService: "svc", KindWorkload: "wl", KindDestinationPolicy: "dp", KindRoute: "rt",
		KindPeerAuthentication: "pa", KindAuthorizationPolicy: "ap", KindStalenessPolicy: "sp", KindOverride: "ov",
	}
	if len(want) != len(Kinds()) {
		t.Fatalf("test lists %d kinds, registry has %d", len(want), len(Kinds()))
	}
	seen := map[string]string{}
	for _, k := range Kinds() {
		if k.ShortName != want[k.Kind] {
			t.Errorf("%s: short name %q, want %q", k.Kind, k.ShortName, want[k.Kind])
		}
		for _, name := range []string{k.Kind, strings.ToLower(k.Kind), strings.ToUpper(k.Kind), k.Plural, strings.ToUpper(k.Plural[:1]) + k.Plural[1:], k.ShortName, strings.ToUpper(k.ShortName)} {
			got, err := ResolveKind(name)
			if err != nil || got.Kind != k.Kind {
				t.Errorf("ResolveKind(%q) = %v, %v; want %s", name, got.Kind, err, k.Kind)
			}
			if other, dup := seen[strings.ToLower(name)]; dup && other != k.Kind {
				t.Errorf("%q names both %s and %s", name, other, k.Kind)
			}
			seen[strings.ToLower(name)] = k.Kind
		}
	}
	_, err := ResolveKind("widgets")
	const wantErr = `unknown kind "widgets"; kinds: meshconfigs (mc), services (svc), workloads (wl), destinationpolicies (dp), routes (rt), peerauthentications (pa), authorizationpolicies (ap), stalenesspolicies (sp), overrides (ov)`
	if err == nil || err.Error() != wantErr {
		t.Errorf("ResolveKind(widgets) error %v, want %s", err, wantErr)
	}
	// The REST API keeps one spelling per path: short names are for people.
	if _, err := LookupKind("svc"); err == nil {
		t.Error("LookupKind accepts a short name")
	}
}
