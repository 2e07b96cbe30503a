package gen

import (
	"math"
	"time"

	clusterv3 "github.com/envoyproxy/go-control-plane/envoy/config/cluster/v3"
	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	endpointv3 "github.com/envoyproxy/go-control-plane/envoy/config/endpoint/v3"
	httpv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/upstreams/http/v3"
	typev3 "github.com/envoyproxy/go-control-plane/envoy/type/v3"
	"github.com/weft-mesh/weft/pilot/ir"
	"google.golang.org/protobuf/types/known/anypb"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/wrapperspb"
)

// httpProtocolOptionsKey is the typed_extension_protocol_options key Envoy (and
// our sidecar) read upstream HTTP protocol options from. grpc-go ignores it.
const httpProtocolOptionsKey = "envoy.extensions.upstreams.http.v3.HttpProtocolOptions"

// RateLimitMetadataKey is the cluster filter_metadata key carrying a
// DestinationPolicy's localRateLimit ({requestsPerSecond, burst, dryRun}) for our
// sidecar (sidecar/xdsresource.RateLimitMetadataKey decodes it; burst 0 there means
// one second's worth).
const RateLimitMetadataKey = "weft.localRateLimit"

// ads is the config source every dynamic reference uses: the same ADS stream.
// grpc-go NACKs anything but ads or self.
func ads() *corev3.ConfigSource {
	return &corev3.ConfigSource{
		ResourceApiVersion:    corev3.ApiVersion_V3,
		ConfigSourceSpecifier: &corev3.ConfigSource_Ads{Ads: &corev3.AggregatedConfigSource{}},
	}
}

// outboundCluster renders an EDS cluster; the ClusterLoadAssignment has the
// cluster's name. proxyless maps RANDOM (which grpc-go NACKs) to ROUND_ROBIN.
func outboundCluster(c *ir.Cluster, proxyless bool) *clusterv3.Cluster {
	out := &clusterv3.Cluster{
		Name:                 c.Name,
		ClusterDiscoveryType: &clusterv3.Cluster_Type{Type: clusterv3.Cluster_EDS},
		EdsClusterConfig:     &clusterv3.Cluster_EdsClusterConfig{EdsConfig: ads()},
		ConnectTimeout:       durationpb.New(c.Policy.ConnectTimeout),
		LbPolicy:             lbPolicy(c.Policy.LB, proxyless),
		CircuitBreakers:      circuitBreakers(c.Policy.Pool),
	}
	if od := c.Policy.Outlier; od != nil {
		out.OutlierDetection = outlierDetection(od)
		// Below this share of healthy hosts the balancer ignores health (Envoy's
		// panic threshold): ejections stop taking hosts away. Always said, so that
		// 0 (panic mode never) does not read as absent (Envoy's 50).
		out.CommonLbConfig = &clusterv3.Cluster_CommonLbConfig{HealthyPanicThreshold: &typev3.Percent{Value: od.MinHealthPercent}}
	}
	if c.Protocol.IsHTTP2() {
		out.TypedExtensionProtocolOptions = map[string]*anypb.Any{httpProtocolOptionsKey: http2Options()}
	}
	out.Metadata = rateLimitMetadata(c.Policy.RateLimit)
	return out
}

func lbPolicy(lb ir.LBPolicy, proxyless bool) clusterv3.Cluster_LbPolicy {
	switch lb {
	case ir.LBLeastRequest:
		return clusterv3.Cluster_LEAST_REQUEST // choice_count defaults to 2, which grpc-go requires
	case ir.LBRandom:
		if proxyless {
			return clusterv3.Cluster_ROUND_ROBIN
		}
		return clusterv3.Cluster_RANDOM
	case ir.LBRingHash:
		return clusterv3.Cluster_RING_HASH // XX_HASH by default, the only hash grpc-go accepts
	}
	return clusterv3.Cluster_ROUND_ROBIN
}

var http2OptionsAny = func() *anypb.Any {
	a, err := anypb.New(&httpv3.HttpProtocolOptions{
		UpstreamProtocolOptions: &httpv3.HttpProtocolOptions_ExplicitHttpConfig_{ExplicitHttpConfig: &httpv3.HttpProtocolOptions_ExplicitHttpConfig{
			ProtocolConfig: &httpv3.HttpProtocolOptions_ExplicitHttpConfig_Http2ProtocolOptions{Http2ProtocolOptions: &corev3.Http2ProtocolOptions{}},
		}},
	})
	if err != nil {
		panic(err) // a constant message always marshals
	}
	return a
}()

// http2Options returns explicit HTTP/2 upstream options (h2c for HTTP2 and GRPC
// ports). The Any is read-only and shared.
func http2Options() *anypb.Any { return http2OptionsAny }

func u32(v uint32) *wrapperspb.UInt32Value {
	if v == 0 {
		return nil
	}
	return wrapperspb.UInt32(v)
}

func circuitBreakers(p *ir.ConnectionPool) *clusterv3.CircuitBreakers {
	if p == nil {
		return nil
	}
	t := &clusterv3.CircuitBreakers_Thresholds{
		Priority:           corev3.RoutingPriority_DEFAULT,
		MaxConnections:     u32(p.MaxConnections),
		MaxPendingRequests: u32(p.MaxPendingRequests),
		MaxRequests:        u32(p.MaxRequests), // the only threshold grpc-go uses
		MaxRetries:         u32(p.MaxRetries),
	}
	if rb := p.RetryBudget; rb != nil {
		t.RetryBudget = &clusterv3.CircuitBreakers_Thresholds_RetryBudget{
			BudgetPercent:       &typev3.Percent{Value: rb.Percent},
			MinRetryConcurrency: u32(rb.MinConcurrency),
		}
	}
	return &clusterv3.CircuitBreakers{Thresholds: []*clusterv3.CircuitBreakers_Thresholds{t}}
}

// outlierDetection says every detector's enforcement explicitly, because Envoy's
// defaults enable consecutive-5xx and success-rate ejection when a field is
// absent: only what the policy names is enforced.
func outlierDetection(od *ir.OutlierDetection) *clusterv3.OutlierDetection {
	const on, off = 100, 0
	enforce := func(set bool) *wrapperspb.UInt32Value {
		if set {
			return wrapperspb.UInt32(on)
		}
		return wrapperspb.UInt32(off)
	}
	out := &clusterv3.OutlierDetection{
		Consecutive_5Xx:                    u32(od.Consecutive5xx),
		EnforcingConsecutive_5Xx:           enforce(od.Consecutive5xx > 0),
		ConsecutiveGatewayFailure:          u32(od.ConsecutiveGatewayErrors),
		EnforcingConsecutiveGatewayFailure: enforce(od.ConsecutiveGatewayErrors > 0),
		EnforcingSuccessRate:               enforce(od.SuccessRate != nil),
		EnforcingFailurePercentage:         enforce(od.FailurePercentage != nil),
		Interval:                           dur(od.Interval),
		BaseEjectionTime:                   dur(od.BaseEjectionTime),
		MaxEjectionTime:                    dur(od.MaxEjectionTime),
		MaxEjectionTimeJitter:              dur(od.MaxEjectionTimeJitter),
		MaxEjectionPercent:                 u32(uint32(math.Round(od.MaxEjectionPercent))),
	}
	// With the split, local-origin failures are counted apart and each API
	// detector runs on both kinds, so its local-origin enforcement follows it.
	// Said explicitly: Envoy's defaults would turn local-origin success rate and
	// consecutive local-origin failures on, and local-origin failure percentage off.
	split := od.SplitExternalLocalOriginErrors
	out.SplitExternalLocalOriginErrors = split
	out.ConsecutiveLocalOriginFailure = u32(od.ConsecutiveLocalOriginFailures)
	out.EnforcingConsecutiveLocalOriginFailure = enforce(split && od.ConsecutiveLocalOriginFailures > 0)
	out.EnforcingLocalOriginSuccessRate = enforce(split && od.SuccessRate != nil)
	out.EnforcingFailurePercentageLocalOrigin = enforce(split && od.FailurePercentage != nil)
	if sr := od.SuccessRate; sr != nil {
		out.SuccessRateMinimumHosts = u32(sr.MinHosts)
		out.SuccessRateRequestVolume = u32(sr.RequestVolume)
		// Envoy's stdev factor is in thousandths (1900 = 1.9).
		out.SuccessRateStdevFactor = u32(uint32(math.Round(sr.StdevFactor * 1000)))
	}
	if fp := od.FailurePercentage; fp != nil {
		out.FailurePercentageThreshold = wrapperspb.UInt32(uint32(math.Round(fp.Threshold)))
		out.FailurePercentageMinimumHosts = u32(fp.MinHosts)
		out.FailurePercentageRequestVolume = u32(fp.RequestVolume)
	}
	return out
}

// dur renders a positive duration; 0 means "not set" and stays absent.
func dur(d time.Duration) *durationpb.Duration {
	if d <= 0 {
		return nil
	}
	return durationpb.New(d)
}

// inboundCluster is a STATIC cluster to the application on localhost. Only Weft
// sidecars get inbound clusters (grpc-go would NACK STATIC).
func inboundCluster(p *ir.Port) *clusterv3.Cluster {
	name := ir.InboundClusterName(p.TargetPort)
	out := &clusterv3.Cluster{
		Name:                 name,
		ClusterDiscoveryType: &clusterv3.Cluster_Type{Type: clusterv3.Cluster_STATIC},
		ConnectTimeout:       durationpb.New(ir.DefaultConnectTimeout),
		LoadAssignment: &endpointv3.ClusterLoadAssignment{
			ClusterName: name,
			Endpoints: []*endpointv3.LocalityLbEndpoints{{
				Locality:    &corev3.Locality{},
				LbEndpoints: []*endpointv3.LbEndpoint{lbEndpoint("127.0.0.1", p.TargetPort, 0, corev3.HealthStatus_UNKNOWN, nil)},
			}},
		},
	}
	if p.Protocol.IsHTTP2() {
		out.TypedExtensionProtocolOptions = map[string]*anypb.Any{httpProtocolOptionsKey: http2Options()}
	}
	return out
}
