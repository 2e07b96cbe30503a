package xdsresource_test

import (
	"errors"
	"math"
	"strings"
	"testing"
	"time"

	clusterv3 "github.com/envoyproxy/go-control-plane/envoy/config/cluster/v3"
	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	typev3 "github.com/envoyproxy/go-control-plane/envoy/type/v3"
	"github.com/google/go-cmp/cmp"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/structpb"
	"google.golang.org/protobuf/types/known/wrapperspb"

	dt "github.com/weft-mesh/weft/sidecar/dataplane/dataplanetest"
	"github.com/weft-mesh/weft/sidecar/outlier"
	"github.com/weft-mesh/weft/sidecar/xdsresource"
)

func decodeCluster(t *testing.T, c *clusterv3.Cluster) (*xdsresource.Cluster, error) {
	t.Helper()
	_, v, err := xdsresource.Decode(xdsresource.ClusterType, dt.Any(c))
	if err != nil {
		return nil, err
	}
	return v.(*xdsresource.Cluster), nil
}

// envoyDefaults is what an empty outlier_detection decodes to: Envoy's defaults
// (consecutive 5xx and success rate on, gateway and failure percentage off).
func envoyDefaults() *xdsresource.Outlier {
	return &xdsresource.Outlier{
		Consecutive5xx: 5, ConsecutiveGatewayFailure: 5, ConsecutiveLocalOriginFailure: 5,
		EnforcingConsecutive5xx: 100, EnforcingConsecutiveGatewayFailure: 0, EnforcingConsecutiveLocalOriginFailure: 100,
		SuccessRate:        &xdsresource.SuccessRate{MinimumHosts: 5, RequestVolume: 100, StdevFactor: 1.9, Enforcing: 100, EnforcingLocalOrigin: 100},
		Interval:           10 * time.Second,
		BaseEjectionTime:   30 * time.Second,
		MaxEjectionTime:    300 * time.Second,
		MaxEjectionPercent: 10,
	}
}

func withOutlier(od *clusterv3.OutlierDetection) *clusterv3.Cluster {
	c := dt.EDSCluster("c", dt.ClusterOpts{})
	c.OutlierDetection = od
	return c
}

func u32(v uint32) *wrapperspb.UInt32Value { return wrapperspb.UInt32(v) }

func TestDecodeOutlier(t *testing.T) {
	tests := []struct {
		name string
		od   *clusterv3.OutlierDetection
		want func(o *xdsresource.Outlier) // edits envoyDefaults()
	}{
		{"empty: Envoy's defaults", &clusterv3.OutlierDetection{}, func(*xdsresource.Outlier) {}},
		{"everything set", &clusterv3.OutlierDetection{
			Consecutive_5Xx: u32(3), ConsecutiveGatewayFailure: u32(4), ConsecutiveLocalOriginFailure: u32(6),
			EnforcingConsecutive_5Xx: u32(0), EnforcingConsecutiveGatewayFailure: u32(100), EnforcingConsecutiveLocalOriginFailure: u32(50),
			SplitExternalLocalOriginErrors: true,
			SuccessRateMinimumHosts:        u32(2), SuccessRateRequestVolume: u32(20), SuccessRateStdevFactor: u32(1500),
			EnforcingSuccessRate: u32(90), EnforcingLocalOriginSuccessRate: u32(80),
			FailurePercentageThreshold: u32(70), FailurePercentageMinimumHosts: u32(3), FailurePercentageRequestVolume: u32(10),
			EnforcingFailurePercentage: u32(60), EnforcingFailurePercentageLocalOrigin: u32(40),
			Interval: durationpb.New(time.Second), BaseEjectionTime: durationpb.New(2 * time.Second),
			MaxEjectionTime: durationpb.New(20 * time.Second), MaxEjectionTimeJitter: durationpb.New(500 * time.Millisecond),
			MaxEjectionPercent: u32(100),
		}, func(o *xdsresource.Outlier) {
			*o = xdsresource.Outlier{
				Consecutive5xx: 3, ConsecutiveGatewayFailure: 4, ConsecutiveLocalOriginFailure: 6,
				EnforcingConsecutive5xx: 0, EnforcingConsecutiveGatewayFailure: 100, EnforcingConsecutiveLocalOriginFailure: 50,
				SplitExternalLocalOriginErrors: true,
				SuccessRate:                    &xdsresource.SuccessRate{MinimumHosts: 2, RequestVolume: 20, StdevFactor: 1.5, Enforcing: 90, EnforcingLocalOrigin: 80},
				FailurePercentage:              &xdsresource.FailurePercentage{Threshold: 70, MinimumHosts: 3, RequestVolume: 10, Enforcing: 60, EnforcingLocalOrigin: 40},
				Interval:                       time.Second, BaseEjectionTime: 2 * time.Second, MaxEjectionTime: 20 * time.Second,
				MaxEjectionTimeJitter: 500 * time.Millisecond, MaxEjectionPercent: 100,
			}
		}},
		{"success rate off when nothing enforces it", &clusterv3.OutlierDetection{EnforcingSuccessRate: u32(0)},
			func(o *xdsresource.Outlier) { o.SuccessRate = nil }},
		{"local-origin success rate enforcing needs split", &clusterv3.OutlierDetection{EnforcingSuccessRate: u32(0), SplitExternalLocalOriginErrors: true},
			func(o *xdsresource.Outlier) {
				o.SplitExternalLocalOriginErrors = true
				o.SuccessRate.Enforcing = 0
			}},
		{"failure percentage on by enforcing", &clusterv3.OutlierDetection{EnforcingFailurePercentage: u32(100)},
			func(o *xdsresource.Outlier) {
				o.FailurePercentage = &xdsresource.FailurePercentage{Threshold: 85, MinimumHosts: 5, RequestVolume: 50, Enforcing: 100}
			}},
		{"failure percentage local origin alone without split stays off", &clusterv3.OutlierDetection{EnforcingFailurePercentageLocalOrigin: u32(100)},
			func(*xdsresource.Outlier) {}},
		{"failure percentage local origin with split", &clusterv3.OutlierDetection{EnforcingFailurePercentageLocalOrigin: u32(100), SplitExternalLocalOriginErrors: true},
			func(o *xdsresource.Outlier) {
				o.SplitExternalLocalOriginErrors = true
				o.FailurePercentage = &xdsresource.FailurePercentage{Threshold: 85, MinimumHosts: 5, RequestVolume: 50, EnforcingLocalOrigin: 100}
			}},
		{"max ejection time defaults to base when base is larger", &clusterv3.OutlierDetection{BaseEjectionTime: durationpb.New(400 * time.Second)},
			func(o *xdsresource.Outlier) { o.BaseEjectionTime, o.MaxEjectionTime = 400*time.Second, 400*time.Second }},
		{"max equal to base", &clusterv3.OutlierDetection{BaseEjectionTime: durationpb.New(time.Second), MaxEjectionTime: durationpb.New(time.Second)},
			func(o *xdsresource.Outlier) { o.BaseEjectionTime, o.MaxEjectionTime = time.Second, time.Second }},
		{"durations at their bounds", &clusterv3.OutlierDetection{Interval: durationpb.New(time.Millisecond), BaseEjectionTime: durationpb.New(time.Millisecond),
			MaxEjectionTime: durationpb.New(xdsresource.MaxOutlierDuration), MaxEjectionTimeJitter: durationpb.New(xdsresource.MaxOutlierDuration)},
			func(o *xdsresource.Outlier) {
				o.Interval, o.BaseEjectionTime = time.Millisecond, time.Millisecond
				o.MaxEjectionTime, o.MaxEjectionTimeJitter = xdsresource.MaxOutlierDuration, xdsresource.MaxOutlierDuration
			}},
		{"percents at 100", &clusterv3.OutlierDetection{MaxEjectionPercent: u32(100), FailurePercentageThreshold: u32(100)},
			func(o *xdsresource.Outlier) { o.MaxEjectionPercent = 100 }},
		{"zeros are values", &clusterv3.OutlierDetection{Consecutive_5Xx: u32(0), MaxEjectionPercent: u32(0), SuccessRateStdevFactor: u32(0)},
			func(o *xdsresource.Outlier) {
				o.Consecutive5xx, o.MaxEjectionPercent, o.SuccessRate.StdevFactor = 0, 0, 0
			}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			c, err := decodeCluster(t, withOutlier(tc.od))
			if err != nil {
				t.Fatal(err)
			}
			want := envoyDefaults()
			tc.want(want)
			if d := cmp.Diff(want, c.Outlier); d != "" {
				t.Errorf("outlier (-want +got):\n%s", d)
			}
		})
	}

	c, err := decodeCluster(t, dt.EDSCluster("c", dt.ClusterOpts{}))
	if err != nil {
		t.Fatal(err)
	}
	if c.Outlier != nil || c.Budget != nil || c.RateLimit != nil || c.PanicThreshold != 50 {
		t.Errorf("bare cluster: Outlier %v Budget %v RateLimit %v PanicThreshold %v, want nil nil nil 50", c.Outlier, c.Budget, c.RateLimit, c.PanicThreshold)
	}
}

func withBudget(rb *clusterv3.CircuitBreakers_Thresholds_RetryBudget) *clusterv3.Cluster {
	c := dt.EDSCluster("c", dt.ClusterOpts{})
	c.CircuitBreakers = &clusterv3.CircuitBreakers{Thresholds: []*clusterv3.CircuitBreakers_Thresholds{
		{Priority: corev3.RoutingPriority_HIGH, RetryBudget: &clusterv3.CircuitBreakers_Thresholds_RetryBudget{BudgetPercent: &typev3.Percent{Value: 99}}},
		{Priority: corev3.RoutingPriority_DEFAULT, RetryBudget: rb},
	}}
	return c
}

func TestDecodeRetryBudget(t *testing.T) {
	tests := []struct {
		name string
		rb   *clusterv3.CircuitBreakers_Thresholds_RetryBudget
		want *xdsresource.RetryBudget
	}{
		{"absent", nil, nil},
		{"empty: Envoy's defaults", &clusterv3.CircuitBreakers_Thresholds_RetryBudget{}, &xdsresource.RetryBudget{Percent: 20, MinConcurrency: 3}},
		{"set", &clusterv3.CircuitBreakers_Thresholds_RetryBudget{BudgetPercent: &typev3.Percent{Value: 12.5}, MinRetryConcurrency: u32(7)}, &xdsresource.RetryBudget{Percent: 12.5, MinConcurrency: 7}},
		{"bounds", &clusterv3.CircuitBreakers_Thresholds_RetryBudget{BudgetPercent: &typev3.Percent{Value: 100}, MinRetryConcurrency: u32(0)}, &xdsresource.RetryBudget{Percent: 100, MinConcurrency: 0}},
		{"zero percent", &clusterv3.CircuitBreakers_Thresholds_RetryBudget{BudgetPercent: &typev3.Percent{Value: 0}}, &xdsresource.RetryBudget{Percent: 0, MinConcurrency: 3}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			c, err := decodeCluster(t, withBudget(tc.rb))
			if err != nil {
				t.Fatal(err)
			}
			if d := cmp.Diff(tc.want, c.Budget); d != "" {
				t.Errorf("budget (-want +got):\n%s", d)
			}
			wantRetries := uint32(3) // Envoy's default max_retries
			if tc.want != nil {
				wantRetries = math.MaxUint32 // the budget alone, as in Envoy
			}
			if c.Limits.MaxRetries != wantRetries {
				t.Errorf("MaxRetries = %d, want %d", c.Limits.MaxRetries, wantRetries)
			}
		})
	}
	// An explicit max_retries stays, and bounds the budget too.
	c := withBudget(&clusterv3.CircuitBreakers_Thresholds_RetryBudget{})
	c.CircuitBreakers.Thresholds[1].MaxRetries = u32(7)
	got, err := decodeCluster(t, c)
	if err != nil {
		t.Fatal(err)
	}
	if got.Limits.MaxRetries != 7 || got.Budget == nil {
		t.Errorf("MaxRetries %d Budget %v, want 7 and a budget", got.Limits.MaxRetries, got.Budget)
	}
}

func withRateLimit(fields map[string]*structpb.Value) *clusterv3.Cluster {
	c := dt.EDSCluster("c", dt.ClusterOpts{})
	c.Metadata = &corev3.Metadata{FilterMetadata: map[string]*structpb.Struct{xdsresource.RateLimitMetadataKey: {Fields: fields}}}
	return c
}

func num(v float64) *structpb.Value { return structpb.NewNumberValue(v) }

func TestDecodeRateLimit(t *testing.T) {
	tests := []struct {
		name   string
		fields map[string]*structpb.Value
		want   *xdsresource.RateLimit
	}{
		{"all", map[string]*structpb.Value{"requestsPerSecond": num(100), "burst": num(200), "dryRun": structpb.NewBoolValue(true)}, &xdsresource.RateLimit{RequestsPerSecond: 100, Burst: 200, DryRun: true}},
		{"burst 0: one second's worth", map[string]*structpb.Value{"requestsPerSecond": num(100), "burst": num(0)}, &xdsresource.RateLimit{RequestsPerSecond: 100, Burst: 100}},
		{"burst absent, fractional rate", map[string]*structpb.Value{"requestsPerSecond": num(2.5)}, &xdsresource.RateLimit{RequestsPerSecond: 2.5, Burst: 3}},
		{"tiny rate: burst at least 1", map[string]*structpb.Value{"requestsPerSecond": num(0.01)}, &xdsresource.RateLimit{RequestsPerSecond: 0.01, Burst: 1}},
		{"rate at bound", map[string]*structpb.Value{"requestsPerSecond": num(xdsresource.MaxRateLimitRPS), "burst": num(xdsresource.MaxRateLimitBurst)},
			&xdsresource.RateLimit{RequestsPerSecond: xdsresource.MaxRateLimitRPS, Burst: xdsresource.MaxRateLimitBurst}},
		{"rate at bound, default burst", map[string]*structpb.Value{"requestsPerSecond": num(xdsresource.MaxRateLimitRPS)},
			&xdsresource.RateLimit{RequestsPerSecond: xdsresource.MaxRateLimitRPS, Burst: xdsresource.MaxRateLimitRPS}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			c, err := decodeCluster(t, withRateLimit(tc.fields))
			if err != nil {
				t.Fatal(err)
			}
			if d := cmp.Diff(tc.want, c.RateLimit); d != "" {
				t.Errorf("rate limit (-want +got):\n%s", d)
			}
		})
	}
}

func TestDefaultBurst(t *testing.T) {
	for _, tc := range []struct {
		rps  float64
		want uint32
	}{{0, 1}, {0.5, 1}, {1, 1}, {1.01, 2}, {xdsresource.MaxRateLimitBurst, xdsresource.MaxRateLimitBurst}, {xdsresource.MaxRateLimitBurst + 1, xdsresource.MaxRateLimitBurst}} {
		if got := xdsresource.DefaultBurst(tc.rps); got != tc.want {
			t.Errorf("DefaultBurst(%v) = %d, want %d", tc.rps, got, tc.want)
		}
	}
}

func TestDecodePanicThreshold(t *testing.T) {
	for _, v := range []float64{0, 12.5, 100} {
		c := dt.EDSCluster("c", dt.ClusterOpts{})
		c.CommonLbConfig = &clusterv3.Cluster_CommonLbConfig{HealthyPanicThreshold: &typev3.Percent{Value: v}}
		got, err := decodeCluster(t, c)
		if err != nil {
			t.Fatal(err)
		}
		if got.PanicThreshold != v {
			t.Errorf("healthy_panic_threshold %v decoded as %v", v, got.PanicThreshold)
		}
	}
	c := dt.EDSCluster("c", dt.ClusterOpts{})
	c.CommonLbConfig = &clusterv3.Cluster_CommonLbConfig{} // present, threshold absent
	if got, err := decodeCluster(t, c); err != nil || got.PanicThreshold != 50 {
		t.Errorf("absent threshold: %v, %v; want 50", got, err)
	}
}

// TestDecodeResilienceErrors: every out-of-range value is rejected naming its field,
// each at one past its bound.
func TestDecodeResilienceErrors(t *testing.T) {
	const pre = `cluster "c": `
	od := func(f func(*clusterv3.OutlierDetection)) *clusterv3.Cluster {
		o := &clusterv3.OutlierDetection{}
		f(o)
		return withOutlier(o)
	}
	panicAt := func(v float64) *clusterv3.Cluster {
		c := dt.EDSCluster("c", dt.ClusterOpts{})
		c.CommonLbConfig = &clusterv3.Cluster_CommonLbConfig{HealthyPanicThreshold: &typev3.Percent{Value: v}}
		return c
	}
	tests := []struct {
		name string
		c    *clusterv3.Cluster
		want string
	}{
		{"max ejection percent", od(func(o *clusterv3.OutlierDetection) { o.MaxEjectionPercent = u32(101) }), "outlier_detection.max_ejection_percent: must be 0..100, got 101"},
		{"enforcing 5xx", od(func(o *clusterv3.OutlierDetection) { o.EnforcingConsecutive_5Xx = u32(101) }), "outlier_detection.enforcing_consecutive_5xx: must be 0..100, got 101"},
		{"enforcing gateway", od(func(o *clusterv3.OutlierDetection) { o.EnforcingConsecutiveGatewayFailure = u32(101) }), "outlier_detection.enforcing_consecutive_gateway_failure: must be 0..100, got 101"},
		{"enforcing local origin", od(func(o *clusterv3.OutlierDetection) { o.EnforcingConsecutiveLocalOriginFailure = u32(101) }), "outlier_detection.enforcing_consecutive_local_origin_failure: must be 0..100, got 101"},
		{"enforcing success rate", od(func(o *clusterv3.OutlierDetection) { o.EnforcingSuccessRate = u32(101) }), "outlier_detection.enforcing_success_rate: must be 0..100, got 101"},
		{"enforcing local success rate", od(func(o *clusterv3.OutlierDetection) { o.EnforcingLocalOriginSuccessRate = u32(101) }), "outlier_detection.enforcing_local_origin_success_rate: must be 0..100, got 101"},
		{"failure threshold", od(func(o *clusterv3.OutlierDetection) { o.FailurePercentageThreshold = u32(101) }), "outlier_detection.failure_percentage_threshold: must be 0..100, got 101"},
		{"enforcing failure percentage", od(func(o *clusterv3.OutlierDetection) { o.EnforcingFailurePercentage = u32(101) }), "outlier_detection.enforcing_failure_percentage: must be 0..100, got 101"},
		{"enforcing local failure percentage", od(func(o *clusterv3.OutlierDetection) { o.EnforcingFailurePercentageLocalOrigin = u32(101) }), "outlier_detection.enforcing_failure_percentage_local_origin: must be 0..100, got 101"},
		{"zero interval", od(func(o *clusterv3.OutlierDetection) { o.Interval = durationpb.New(0) }), "outlier_detection.interval: must be positive"},
		{"negative interval", od(func(o *clusterv3.OutlierDetection) { o.Interval = durationpb.New(-time.Second) }), "outlier_detection.interval: must not be negative"},
		{"zero base", od(func(o *clusterv3.OutlierDetection) { o.BaseEjectionTime = durationpb.New(0) }), "outlier_detection.base_ejection_time: must be positive"},
		{"zero max", od(func(o *clusterv3.OutlierDetection) { o.MaxEjectionTime = durationpb.New(0) }), "outlier_detection.max_ejection_time: must be positive"},
		{"interval below 1ms", od(func(o *clusterv3.OutlierDetection) { o.Interval = durationpb.New(time.Millisecond - 1) }), "outlier_detection.interval: 999.999µs outside [1ms, 87600h0m0s]"},
		{"base past the limit", od(func(o *clusterv3.OutlierDetection) {
			o.BaseEjectionTime = durationpb.New(xdsresource.MaxOutlierDuration + 1)
		}), "outlier_detection.base_ejection_time: 87600h0m0.000000001s outside [1ms, 87600h0m0s]"},
		{"max past the limit", od(func(o *clusterv3.OutlierDetection) {
			o.MaxEjectionTime = durationpb.New(xdsresource.MaxOutlierDuration + 1)
		}), "outlier_detection.max_ejection_time: 87600h0m0.000000001s outside [1ms, 87600h0m0s]"},
		{"jitter below 1ms", od(func(o *clusterv3.OutlierDetection) { o.MaxEjectionTimeJitter = durationpb.New(time.Microsecond) }), "outlier_detection.max_ejection_time_jitter: 1µs outside [1ms, 87600h0m0s]"},
		{"negative jitter", od(func(o *clusterv3.OutlierDetection) { o.MaxEjectionTimeJitter = durationpb.New(-time.Nanosecond) }), "outlier_detection.max_ejection_time_jitter: must not be negative"},
		{"max below base", od(func(o *clusterv3.OutlierDetection) {
			o.BaseEjectionTime, o.MaxEjectionTime = durationpb.New(time.Second), durationpb.New(time.Second-time.Nanosecond)
		}), "outlier_detection.max_ejection_time: 999.999999ms is less than base_ejection_time 1s"},
		{"budget percent", withBudget(&clusterv3.CircuitBreakers_Thresholds_RetryBudget{BudgetPercent: &typev3.Percent{Value: math.Nextafter(100, 200)}}),
			"circuit_breakers.thresholds[1].retry_budget.budget_percent: must be 0..100, got 100.00000000000001"},
		{"budget percent negative", withBudget(&clusterv3.CircuitBreakers_Thresholds_RetryBudget{BudgetPercent: &typev3.Percent{Value: -1}}),
			"circuit_breakers.thresholds[1].retry_budget.budget_percent: must be 0..100, got -1"},
		{"budget percent NaN", withBudget(&clusterv3.CircuitBreakers_Thresholds_RetryBudget{BudgetPercent: &typev3.Percent{Value: math.NaN()}}),
			"circuit_breakers.thresholds[1].retry_budget.budget_percent: must be 0..100, got NaN"},
		{"panic threshold", panicAt(100.5), "common_lb_config.healthy_panic_threshold: must be 0..100, got 100.5"},
		{"panic threshold negative", panicAt(-0.5), "common_lb_config.healthy_panic_threshold: must be 0..100, got -0.5"},
		{"rate missing", withRateLimit(map[string]*structpb.Value{"burst": num(1)}), `metadata.filter_metadata["weft.localRateLimit"].requestsPerSecond: required`},
		{"rate zero", withRateLimit(map[string]*structpb.Value{"requestsPerSecond": num(0)}), `metadata.filter_metadata["weft.localRateLimit"].requestsPerSecond: must be a number in (0, 1e+09], got 0`},
		{"rate past bound", withRateLimit(map[string]*structpb.Value{"requestsPerSecond": num(xdsresource.MaxRateLimitRPS + 1)}), `metadata.filter_metadata["weft.localRateLimit"].requestsPerSecond: must be a number in (0, 1e+09], got 1.000000001e+09`},
		{"rate string", withRateLimit(map[string]*structpb.Value{"requestsPerSecond": structpb.NewStringValue("100")}), `metadata.filter_metadata["weft.localRateLimit"].requestsPerSecond: must be a number in (0, 1e+09], got 100`},
		{"burst past bound", withRateLimit(map[string]*structpb.Value{"requestsPerSecond": num(1), "burst": num(xdsresource.MaxRateLimitBurst + 1)}), `metadata.filter_metadata["weft.localRateLimit"].burst: must be an integer 0..1073741824, got 1.073741825e+09`},
		{"burst fraction", withRateLimit(map[string]*structpb.Value{"requestsPerSecond": num(1), "burst": num(1.5)}), `metadata.filter_metadata["weft.localRateLimit"].burst: must be an integer 0..1073741824, got 1.5`},
		{"burst negative", withRateLimit(map[string]*structpb.Value{"requestsPerSecond": num(1), "burst": num(-1)}), `metadata.filter_metadata["weft.localRateLimit"].burst: must be an integer 0..1073741824, got -1`},
		{"dryRun not bool", withRateLimit(map[string]*structpb.Value{"requestsPerSecond": num(1), "dryRun": structpb.NewStringValue("yes")}), `metadata.filter_metadata["weft.localRateLimit"].dryRun: must be a bool, got yes`},
		{"unknown field", withRateLimit(map[string]*structpb.Value{"requestsPerSecond": num(1), "shadow": structpb.NewBoolValue(true)}), `metadata.filter_metadata["weft.localRateLimit"].shadow: unknown field`},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			_, err := decodeCluster(t, tc.c)
			if err == nil {
				t.Fatalf("no error, want %q", tc.want)
			}
			if got := strings.TrimPrefix(err.Error(), pre); got != tc.want {
				t.Errorf("error\n got: %s\nwant: %s", err, pre+tc.want)
			}
			if !errors.Is(err, xdsresource.ErrInvalid) {
				t.Error("error does not wrap ErrInvalid")
			}
		})
	}
}

// TestOutlierBoundsMatchDetector: what decode accepts, the detector's Validate
// accepts, so an accepted cluster never fails later in dataplane compile.
func TestOutlierBoundsMatchDetector(t *testing.T) {
	if xdsresource.MinOutlierDuration != outlier.MinDuration || xdsresource.MaxOutlierDuration != outlier.MaxDuration {
		t.Errorf("decode bounds [%s, %s], detector bounds [%s, %s]", xdsresource.MinOutlierDuration, xdsresource.MaxOutlierDuration, outlier.MinDuration, outlier.MaxDuration)
	}
}
