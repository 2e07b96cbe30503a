package dataplane

import (
	"fmt"
	"time"

	"github.com/weft-mesh/weft/sidecar/cluster"
	"github.com/weft-mesh/weft/sidecar/ratelimit"
	"github.com/weft-mesh/weft/sidecar/xdsresource"
)

// rateLimitConfig is xc's local rate limit as the limiter takes it (off: none).
func rateLimitConfig(xc *xdsresource.Cluster) ratelimit.Config {
	rl := xc.RateLimit
	if rl == nil {
		return ratelimit.Config{}
	}
	return ratelimit.Config{RequestsPerSecond: rl.RequestsPerSecond, Burst: rl.Burst, DryRun: rl.DryRun}
}

// rateLimit checks c's local rate limit (xc's) and queues it for activation on
// the service key's long-lived limiter. first is the cluster of the same key
// compiled before (nil: c is the first): subset clusters share one bucket, so
// they must agree on it.
func (cfg *Config) rateLimit(c *cluster.Cluster, xc, first *xdsresource.Cluster) error {
	const field = `metadata.filter_metadata["` + xdsresource.RateLimitMetadataKey + `"]`
	rl := rateLimitConfig(xc)
	if err := rl.Validate(); err != nil {
		return fmt.Errorf("%w: cluster %q: %s: %v", ErrInvalid, xc.Name, field, err)
	}
	if first != nil {
		if fl := rateLimitConfig(first); fl != rl {
			return fmt.Errorf("%w: cluster %q: %s (%+v) differs from cluster %q's (%+v): clusters of service key %q share one rate limit",
				ErrInvalid, xc.Name, field, rl, first.Name, fl, c.Shared.Key)
		}
		return nil
	}
	l := c.Shared.Limiter
	// Configure cannot fail: rl was validated. The clock is read at activation,
	// not per request.
	cfg.commits = append(cfg.commits, func() { _ = l.Configure(rl, time.Now()) })
	return nil
}
