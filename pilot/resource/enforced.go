package resource

import (
	"fmt"
	"sort"
	"strings"
)

// NotEnforced names the API fields pilot stores and sends but Weft sidecars do not
// act on yet, each with why. Applying (or validating) an object that sets one
// answers a warning naming the field, so no policy is accepted and silently left
// unenforced (issue #8). Keys are keys of fieldsSet. Remove an entry when the
// sidecar enforces the field. Read only.
//
// Empty at the end of issue #8: Weft sidecars enforce every DestinationPolicy and
// Route field (checked against main then). What remains unenforced depends on the
// Service, and ValidateSet warns on it itself: connectionPool fields only HTTP uses
// on a TCP-only Service, and Routes to TCP ports. Proxyless gRPC clients enforce
// less (README, "Resilience API"); pilot cannot know at apply who consumes a Service.
var NotEnforced = map[string]string{}

// fieldsSet says, for each resilience field of DestinationPolicy and Route, where
// an object sets it (concrete paths, in order). A key may name one value of a
// list field ("spec.http[].retries.retryOn=refused-stream").
var fieldsSet = map[string]func(o *Object) []path{}

func init() {
	dp := func(field string, set func(s *DestinationPolicySpec) bool) {
		fieldsSet[field] = func(o *Object) []path {
			if s, ok := o.Spec.(*DestinationPolicySpec); ok && set(s) {
				return []path{path(field)}
			}
			return nil
		}
	}
	pool := func(s *DestinationPolicySpec) *ConnectionPool {
		if s.ConnectionPool == nil {
			return &ConnectionPool{}
		}
		return s.ConnectionPool
	}
	od := func(s *DestinationPolicySpec) *OutlierDetection {
		if s.OutlierDetection == nil {
			return &OutlierDetection{}
		}
		return s.OutlierDetection
	}
	dp("spec.connectionPool.maxConnections", func(s *DestinationPolicySpec) bool { return pool(s).MaxConnections > 0 })
	dp("spec.connectionPool.maxPendingRequests", func(s *DestinationPolicySpec) bool { return pool(s).MaxPendingRequests > 0 })
	dp("spec.connectionPool.maxRequests", func(s *DestinationPolicySpec) bool { return pool(s).MaxRequests > 0 })
	dp("spec.connectionPool.maxRetries", func(s *DestinationPolicySpec) bool { return pool(s).MaxRetries > 0 })
	dp("spec.connectionPool.retryBudget", func(s *DestinationPolicySpec) bool { return pool(s).RetryBudget != nil })
	dp("spec.connectionPool.connectTimeout", func(s *DestinationPolicySpec) bool { return pool(s).ConnectTimeout != "" })
	dp("spec.outlierDetection.consecutive5xx", func(s *DestinationPolicySpec) bool { return od(s).Consecutive5xx > 0 })
	dp("spec.outlierDetection.consecutiveGatewayErrors", func(s *DestinationPolicySpec) bool { return od(s).ConsecutiveGatewayErrors > 0 })
	dp("spec.outlierDetection.consecutiveLocalOriginFailures", func(s *DestinationPolicySpec) bool { return od(s).ConsecutiveLocalOriginFailures > 0 })
	dp("spec.outlierDetection.splitExternalLocalOriginErrors", func(s *DestinationPolicySpec) bool {
		return od(s).SplitExternalLocalOriginErrors != nil && *od(s).SplitExternalLocalOriginErrors
	})
	dp("spec.outlierDetection.successRate", func(s *DestinationPolicySpec) bool { return od(s).SuccessRate != nil })
	dp("spec.outlierDetection.failurePercentage", func(s *DestinationPolicySpec) bool { return od(s).FailurePercentage != nil })
	dp("spec.outlierDetection.interval", func(s *DestinationPolicySpec) bool { return od(s).Interval != "" })
	dp("spec.outlierDetection.baseEjectionTime", func(s *DestinationPolicySpec) bool { return od(s).BaseEjectionTime != "" })
	dp("spec.outlierDetection.maxEjectionTime", func(s *DestinationPolicySpec) bool { return od(s).MaxEjectionTime != "" })
	dp("spec.outlierDetection.maxEjectionTimeJitter", func(s *DestinationPolicySpec) bool { return od(s).MaxEjectionTimeJitter != "" })
	dp("spec.outlierDetection.maxEjectionPercent", func(s *DestinationPolicySpec) bool { return od(s).MaxEjectionPercent > 0 })
	dp("spec.outlierDetection.minHealthPercent", func(s *DestinationPolicySpec) bool { return od(s).MinHealthPercent != nil })
	dp("spec.outlierDetection", func(s *DestinationPolicySpec) bool { return s.OutlierDetection != nil })
	dp("spec.localRateLimit", func(s *DestinationPolicySpec) bool { return s.LocalRateLimit != nil })
	dp("spec.localRateLimit.dryRun", func(s *DestinationPolicySpec) bool { return s.LocalRateLimit != nil && s.LocalRateLimit.DryRun })

	rule := func(field string, set func(r *HTTPRoute) bool) {
		fieldsSet[field] = func(o *Object) []path {
			s, ok := o.Spec.(*RouteSpec)
			if !ok {
				return nil
			}
			var out []path
			for i := range s.HTTP {
				if set(&s.HTTP[i]) {
					out = append(out, path(strings.Replace(field, "spec.http[]", string(path("spec.http").index(i)), 1)))
				}
			}
			return out
		}
	}
	rule("spec.http[].timeout", func(r *HTTPRoute) bool { return r.Timeout != "" })
	rule("spec.http[].retries", func(r *HTTPRoute) bool { return r.Retries != nil })
	rule("spec.http[].retries.perTryTimeout", func(r *HTTPRoute) bool { return r.Retries != nil && r.Retries.PerTryTimeout != "" })
	rule("spec.http[].fallback", func(r *HTTPRoute) bool { return len(r.Fallback) > 0 })
	for _, cond := range retryOnValues {
		field := "spec.http[].retries.retryOn=" + cond
		fieldsSet[field] = func(o *Object) []path {
			s, ok := o.Spec.(*RouteSpec)
			if !ok {
				return nil
			}
			var out []path
			for i, r := range s.HTTP {
				if r.Retries == nil {
					continue
				}
				for j, c := range r.Retries.RetryOn {
					if c == cond {
						out = append(out, path("spec.http").index(i).child("retries").child("retryOn").index(j))
					}
				}
			}
			return out
		}
	}
}

// notEnforcedWarnings are o's warnings for the fields of table it sets, by field
// then path.
func notEnforcedWarnings(o *Object, table map[string]string) []string {
	fields := make([]string, 0, len(table))
	for f := range table {
		fields = append(fields, f)
	}
	sort.Strings(fields)
	var out []string
	for _, f := range fields {
		set, ok := fieldsSet[f]
		if !ok {
			continue // TestNotEnforcedNamesKnownFields keeps the table honest
		}
		for _, p := range set(o) {
			out = append(out, (&FieldError{Object: o.Key().String(), Field: string(p),
				Detail: fmt.Sprintf("accepted but not enforced by Weft sidecars yet: %s", table[f])}).Error())
		}
	}
	return out
}
