package ejectreport

import (
	"time"

	"github.com/weft-mesh/weft/internal/outlierreport"
	"github.com/weft-mesh/weft/sidecar/outlier"
)

// detectors maps the sidecar's detector kinds to the wire's.
var detectors = [outlier.NumKinds]outlierreport.Detector{
	outlier.KindConsecutive5xx:                outlierreport.Consecutive5xx,
	outlier.KindConsecutiveGatewayFailure:     outlierreport.ConsecutiveGatewayErrors,
	outlier.KindConsecutiveLocalOriginFailure: outlierreport.ConsecutiveLocalOriginFailures,
	outlier.KindSuccessRate:                   outlierreport.SuccessRate,
	outlier.KindSuccessRateLocalOrigin:        outlierreport.SuccessRateLocalOrigin,
	outlier.KindFailurePercentage:             outlierreport.FailurePercentage,
	outlier.KindFailurePercentageLocalOrigin:  outlierreport.FailurePercentageLocalOrigin,
}

// Entries turns the registry's ejection snapshot into report entries at now:
// the age is now − Since (a sidecar's clock never crosses the wire), the times
// the host's ejection multiplier. An ejection of an unknown kind is kept with
// detector 0, which Fit leaves out (still counted in Total).
func Entries(now time.Time, es []outlier.Ejection) []outlierreport.Entry {
	out := make([]outlierreport.Entry, 0, len(es))
	for _, e := range es {
		var d outlierreport.Detector
		if e.Detector < outlier.NumKinds {
			d = detectors[e.Detector]
		}
		out = append(out, outlierreport.Entry{Service: e.Service, Endpoint: e.Host, Detector: d,
			Age: max(now.Sub(e.Since), 0), Times: min(max(e.Multiplier, 1), outlierreport.MaxTimes)})
	}
	return out
}
