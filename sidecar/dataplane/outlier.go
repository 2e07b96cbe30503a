package dataplane

import (
	"fmt"
	"reflect"
	"slices"
	"strings"

	"github.com/weft-mesh/weft/sidecar/cluster"
	"github.com/weft-mesh/weft/sidecar/outlier"
	"github.com/weft-mesh/weft/sidecar/xdsresource"
)

// outlierConfig copies a decoded outlier detection into the detector's Config,
// field by field (nil: detection off).
func outlierConfig(o *xdsresource.Outlier) *outlier.Config {
	if o == nil {
		return nil
	}
	c := &outlier.Config{
		Consecutive5xx:                         o.Consecutive5xx,
		ConsecutiveGatewayFailure:              o.ConsecutiveGatewayFailure,
		ConsecutiveLocalOriginFailure:          o.ConsecutiveLocalOriginFailure,
		EnforcingConsecutive5xx:                o.EnforcingConsecutive5xx,
		EnforcingConsecutiveGatewayFailure:     o.EnforcingConsecutiveGatewayFailure,
		EnforcingConsecutiveLocalOriginFailure: o.EnforcingConsecutiveLocalOriginFailure,
		SplitExternalLocalOriginErrors:         o.SplitExternalLocalOriginErrors,
		Interval:                               o.Interval,
		BaseEjectionTime:                       o.BaseEjectionTime,
		MaxEjectionTime:                        o.MaxEjectionTime,
		MaxEjectionTimeJitter:                  o.MaxEjectionTimeJitter,
		MaxEjectionPercent:                     o.MaxEjectionPercent,
	}
	if s := o.SuccessRate; s != nil {
		c.SuccessRate = &outlier.SuccessRate{MinimumHosts: s.MinimumHosts, RequestVolume: s.RequestVolume,
			StdevFactor: s.StdevFactor, Enforcing: s.Enforcing, EnforcingLocalOrigin: s.EnforcingLocalOrigin}
	}
	if f := o.FailurePercentage; f != nil {
		c.FailurePercentage = &outlier.FailurePercentage{Threshold: f.Threshold, MinimumHosts: f.MinimumHosts,
			RequestVolume: f.RequestVolume, Enforcing: f.Enforcing, EnforcingLocalOrigin: f.EnforcingLocalOrigin}
	}
	return c
}

// compileOutlier checks xc's outlier detection and, for the first cluster of its
// service key (first == xc), queues its application to the key's detector at
// activation; the subset clusters of a key share one detector, so the others must
// agree with the first.
func (cfg *Config) compileOutlier(c *cluster.Cluster, xc, first *xdsresource.Cluster) error {
	oc := outlierConfig(xc.Outlier)
	if first != xc {
		if fc := outlierConfig(first.Outlier); !reflect.DeepEqual(fc, oc) {
			return fmt.Errorf("%w: cluster %q: outlier_detection differs from cluster %q's: clusters of service key %q share one outlier detector",
				ErrInvalid, xc.Name, first.Name, c.Shared.Key)
		}
		return nil
	}
	if oc != nil {
		if err := oc.Validate(); err != nil {
			return fmt.Errorf("%w: cluster %q: outlier_detection: %v", ErrInvalid, xc.Name, err)
		}
	}
	d := c.Shared.Outlier
	cfg.commits = append(cfg.commits, func() { _ = d.Configure(oc) }) // validated above
	return nil
}

// Clusters returns c's clusters in name order (admin: the panic-mode gauge).
func (c *Config) Clusters() []*cluster.Cluster {
	out := make([]*cluster.Cluster, 0, len(c.clusters))
	for _, cl := range c.clusters {
		out = append(out, cl)
	}
	slices.SortFunc(out, func(a, b *cluster.Cluster) int { return strings.Compare(a.Name, b.Name) })
	return out
}
