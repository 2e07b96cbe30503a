package gen

import (
	"math"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	"github.com/weft-mesh/weft/pilot/ir"
	"google.golang.org/protobuf/types/known/structpb"
)

// inboundRateLimit is the local rate limit the sidecar applies on its inbound
// target port: the localRateLimit of the DestinationPolicy of each Service the
// sidecar's workload backs on that port (API.md: "when a DestinationPolicy's
// service selects the sidecar's own workload, on its inbound port"); nil: none.
//
// One inbound cluster serves every Service that targets the port, and a request
// there cannot always be told apart by Service, so when several of them set a
// limit the strictest one applies, which keeps every one of them: an enforcing
// limit before a dry run, then the lowest rate, then the smallest burst.
func inboundRateLimit(c class, targetPort uint32) *ir.LocalRateLimit {
	var best *ir.LocalRateLimit
	for _, svc := range c.backs {
		if svc.Policy == nil || svc.Policy.Policy.RateLimit == nil {
			continue
		}
		for _, p := range svc.Ports {
			if p.TargetPort == targetPort {
				if rl := svc.Policy.Policy.RateLimit; best == nil || stricter(rl, best) {
					best = rl
				}
				break
			}
		}
	}
	return best
}

// stricter reports whether a admits fewer requests than b (see inboundRateLimit).
func stricter(a, b *ir.LocalRateLimit) bool {
	if a.DryRun != b.DryRun {
		return !a.DryRun // an enforcing limit beats any dry run
	}
	if a.RequestsPerSecond != b.RequestsPerSecond {
		return a.RequestsPerSecond < b.RequestsPerSecond
	}
	return effectiveBurst(a) < effectiveBurst(b)
}

// effectiveBurst is the bucket size the sidecar uses: burst, or one second's
// worth of requests (at least 1) when burst is 0 (xdsresource.DefaultBurst).
func effectiveBurst(rl *ir.LocalRateLimit) float64 {
	if rl.Burst > 0 {
		return float64(rl.Burst)
	}
	return max(1, math.Ceil(rl.RequestsPerSecond))
}

// rateLimitMetadata is the cluster metadata carrying rl under
// RateLimitMetadataKey; nil for no limit.
func rateLimitMetadata(rl *ir.LocalRateLimit) *corev3.Metadata {
	if rl == nil {
		return nil
	}
	fields := map[string]*structpb.Value{
		"requestsPerSecond": structpb.NewNumberValue(rl.RequestsPerSecond),
		"burst":             structpb.NewNumberValue(float64(rl.Burst)),
	}
	if rl.DryRun { // absent decodes as false: enforcing limits' bytes stay as they were
		fields["dryRun"] = structpb.NewBoolValue(true)
	}
	return &corev3.Metadata{FilterMetadata: map[string]*structpb.Struct{RateLimitMetadataKey: {Fields: fields}}}
}
