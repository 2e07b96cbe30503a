//lint:file-ignore SA1019 deprecated Envoy fields are still sent by peers; decoding them is deliberate.

package xdsresource

import (
	"fmt"
	"maps"
	"math"
	"net/netip"
	"slices"
	"time"

	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/structpb"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/weft-mesh/weft/bootstrap/leds"
	"github.com/weft-mesh/weft/sidecar/xdswire"
)

const (
	httpOptionsKey     = "envoy.extensions.upstreams.http.v3.HttpProtocolOptions"
	httpOptionsTypeURL = "type.googleapis.com/" + httpOptionsKey
)

// Endpoint metadata marking a peer sidecar's inbound listener (pilot's gen
// writes it; any other value or type means "not a peer").
const (
	endpointMetadataKey = "weft"
	peerField           = "peer"
	peerSidecar         = "sidecar"
	// mtlsField "true": the endpoint's sidecar has an identity and takes mTLS
	// (auto-mTLS: used when the cluster has a transport socket).
	mtlsField = "mtls"
)

// endpointMeta is an endpoint's "weft" metadata: its own if it has one, else
// its locality group's (pilot writes the tuple most of a group shares once,
// on the LocalityLbEndpoints, and only differing endpoints carry their own,
// which replaces the group's as a whole).
func endpointMeta(le *xdswire.LocalityLbEndpoints, lb *xdswire.LbEndpoint) *structpb.Struct {
	if st, ok := lb.GetMetadata().GetFilterMetadata()[endpointMetadataKey]; ok {
		return st
	}
	return le.GetMetadata().GetFilterMetadata()[endpointMetadataKey]
}

func isMTLS(md *structpb.Struct) bool {
	return md.GetFields()[mtlsField].GetStringValue() == "true"
}

func isPeer(md *structpb.Struct) bool {
	return md.GetFields()[peerField].GetStringValue() == peerSidecar
}

func decodeCluster(m *xdswire.Cluster) (*Cluster, error) {
	e := errs{kind: "cluster", name: m.GetName()}
	if err := checkName(e, "name", m.GetName()); err != nil {
		return nil, err
	}
	c := &Cluster{Name: m.GetName()}
	switch m.GetType() {
	case xdswire.Cluster_EDS:
		c.EDSName = m.GetEdsClusterConfig().GetServiceName()
		if c.EDSName == "" {
			c.EDSName = m.GetName() // Envoy: the cluster name is the EDS name by default
		}
		if len(c.EDSName) > MaxNameBytes {
			return nil, e.at("eds_cluster_config.service_name", "is %d bytes, limit %d", len(c.EDSName), MaxNameBytes)
		}
	case xdswire.Cluster_STATIC:
		// No load_assignment (or an empty one): no endpoints, Istio's
		// BlackHoleCluster; what is sent to it is refused and counted.
		eps := &Endpoints{}
		if la := m.GetLoadAssignment(); la != nil {
			var err error
			if eps, err = decodeAssignment(e, "load_assignment.", la); err != nil {
				return nil, err
			}
		}
		eps.Name = m.GetName()
		c.Static = eps
	case xdswire.Cluster_ORIGINAL_DST:
		if err := checkOriginalDst(e, m); err != nil {
			return nil, err
		}
		c.OriginalDst = true
	default:
		return nil, e.at("type", "unsupported discovery type %s (want EDS, STATIC or ORIGINAL_DST)", m.GetType())
	}
	ct, err := duration(e, "connect_timeout", m.GetConnectTimeout(), 5e9) // Envoy's default
	if err != nil {
		return nil, err
	}
	if ct == 0 {
		return nil, e.at("connect_timeout", "must be positive")
	}
	c.ConnectTimeout = ct
	switch m.GetLbPolicy() {
	case xdswire.Cluster_CLUSTER_PROVIDED:
		if !c.OriginalDst {
			return nil, e.at("lb_policy", "CLUSTER_PROVIDED is only valid with type ORIGINAL_DST")
		}
	case xdswire.Cluster_ROUND_ROBIN:
		c.LB = RoundRobin
	case xdswire.Cluster_LEAST_REQUEST:
		c.LB = LeastRequest
	case xdswire.Cluster_RANDOM:
		c.LB = Random
	case xdswire.Cluster_RING_HASH:
		c.LB = RingHash
		c.RingMin, c.RingMax = 1024, 8*1024*1024
		if rh := m.GetRingHashLbConfig(); rh != nil {
			if v := rh.GetMinimumRingSize(); v != nil {
				c.RingMin = v.GetValue()
			}
			if v := rh.GetMaximumRingSize(); v != nil {
				c.RingMax = v.GetValue()
			}
		}
		if c.RingMax > MaxRingSize {
			c.RingMax = MaxRingSize // Envoy caps too; a bigger ring buys nothing here
		}
		if c.RingMin == 0 || c.RingMin > c.RingMax {
			return nil, e.at("ring_hash_lb_config.minimum_ring_size", "must be 1..%d, got %d", c.RingMax, c.RingMin)
		}
	default:
		return nil, e.at("lb_policy", "unsupported %s", m.GetLbPolicy())
	}
	c.Limits = DefaultThresholds
	for i, t := range m.GetCircuitBreakers().GetThresholds() {
		if t.GetPriority() != xdswire.RoutingPriority_DEFAULT {
			continue
		}
		f := fmt.Sprintf("circuit_breakers.thresholds[%d]", i)
		for _, s := range []struct {
			dst  *uint32
			v    *wrapperspb.UInt32Value
			name string
		}{
			{&c.Limits.MaxConnections, t.GetMaxConnections(), "max_connections"},
			{&c.Limits.MaxPendingRequests, t.GetMaxPendingRequests(), "max_pending_requests"},
			{&c.Limits.MaxRequests, t.GetMaxRequests(), "max_requests"},
		} {
			if s.v == nil {
				continue
			}
			if s.v.GetValue() == 0 {
				return nil, e.at(f+"."+s.name, "must be positive")
			}
			*s.dst = s.v.GetValue()
		}
		if t.GetMaxRetries() != nil {
			c.Limits.MaxRetries = t.GetMaxRetries().GetValue() // 0 is legal: no retries
		}
		if rb := t.GetRetryBudget(); rb != nil {
			b := &RetryBudget{Percent: 20, MinConcurrency: 3} // Envoy's defaults
			if p := rb.GetBudgetPercent(); p != nil {
				v, err := percentValue(e, f+".retry_budget.budget_percent", p.GetValue())
				if err != nil {
					return nil, err
				}
				b.Percent = v
			}
			if v := rb.GetMinRetryConcurrency(); v != nil {
				b.MinConcurrency = v.GetValue() // 0 is legal: the percent alone
			}
			c.Budget = b
			if t.GetMaxRetries() == nil {
				// Envoy: a retry budget replaces the max_retries breaker. Weft
				// bounds retries by both when both are given, so an absent
				// max_retries must not cap the budget at its default of 3.
				c.Limits.MaxRetries = math.MaxUint32
			}
		}
	}
	if od := m.GetOutlierDetection(); od != nil {
		if c.Outlier, err = decodeOutlier(e, od); err != nil {
			return nil, err
		}
	}
	c.PanicThreshold = 50 // Envoy's default
	if p := m.GetCommonLbConfig().GetHealthyPanicThreshold(); p != nil {
		if c.PanicThreshold, err = percentValue(e, "common_lb_config.healthy_panic_threshold", p.GetValue()); err != nil {
			return nil, err
		}
	}
	if c.RateLimit, err = decodeRateLimit(e, m.GetMetadata().GetFilterMetadata()[RateLimitMetadataKey]); err != nil {
		return nil, err
	}
	if m.GetHttp2ProtocolOptions() != nil {
		c.HTTP2 = true
	}
	if a, ok := m.GetTypedExtensionProtocolOptions()[httpOptionsKey]; ok {
		o := &xdswire.HttpProtocolOptions{}
		if err := unpack(a, httpOptionsTypeURL, o); err != nil {
			return nil, e.at("typed_extension_protocol_options[\""+httpOptionsKey+"\"]", "malformed: %v", err)
		}
		if ex := o.GetExplicitHttpConfig(); ex != nil {
			switch {
			case ex.GetHttp2ProtocolOptions() != nil:
				c.HTTP2 = true
			case ex.GetHttp3ProtocolOptions() != nil:
				return nil, e.at("typed_extension_protocol_options[\""+httpOptionsKey+"\"].explicit_http_config", "HTTP/3 is not supported")
			}
		}
	}
	if ts := m.GetTransportSocket(); ts != nil {
		t, err := decodeUpstreamTLS(e, "transport_socket", ts)
		if err != nil {
			return nil, err
		}
		c.TLS = t
	}
	if len(m.GetTransportSocketMatches()) > 0 {
		return nil, e.at("transport_socket_matches", "not supported: endpoints say mtls in their metadata (filter_metadata[%q].%s)", endpointMetadataKey, mtlsField)
	}
	return c, nil
}

// checkOriginalDst refuses what an ORIGINAL_DST cluster would carry and the
// sidecar could not honour: its own endpoints, a load-balancing policy other
// than CLUSTER_PROVIDED (Envoy refuses it too), destination overrides from a
// header or metadata, a fixed upstream port, outlier detection over hosts that
// exist one connection at a time, and an upstream TLS context (passthrough
// carries the application's bytes as they are).
func checkOriginalDst(e errs, m *xdswire.Cluster) error {
	switch {
	case m.GetLbPolicy() != xdswire.Cluster_CLUSTER_PROVIDED:
		return e.at("lb_policy", "%s: type ORIGINAL_DST needs CLUSTER_PROVIDED", m.GetLbPolicy())
	case len(m.GetLoadAssignment().GetEndpoints()) > 0:
		return e.at("load_assignment", "an ORIGINAL_DST cluster has no endpoints of its own")
	case m.GetEdsClusterConfig() != nil:
		return e.at("eds_cluster_config", "not valid with type ORIGINAL_DST")
	case m.GetOutlierDetection() != nil:
		return e.at("outlier_detection", "not supported with type ORIGINAL_DST")
	case m.GetTransportSocket() != nil:
		return e.at("transport_socket", "not supported with type ORIGINAL_DST (passthrough forwards the application's bytes)")
	}
	if o := m.GetOriginalDstLbConfig(); o != nil {
		if o.GetUseHttpHeader() || o.GetHttpHeaderName() != "" || o.GetUpstreamPortOverride() != nil || o.GetMetadataKey() != nil {
			return e.at("original_dst_lb_config", "only the connection's original destination is supported (no header, metadata or port override)")
		}
	}
	return nil
}

func decodeEndpoints(m *xdswire.ClusterLoadAssignment) (*Endpoints, error) {
	e := errs{kind: "endpoints", name: m.GetClusterName()}
	if err := checkName(e, "cluster_name", m.GetClusterName()); err != nil {
		return nil, err
	}
	eps, err := decodeAssignment(e, "", m)
	if err != nil {
		return nil, err
	}
	eps.Name = m.GetClusterName()
	return eps, nil
}

func decodeAssignment(e errs, prefix string, m *xdswire.ClusterLoadAssignment) (*Endpoints, error) {
	out := &Endpoints{}
	total := 0
	for i, le := range m.GetEndpoints() {
		total += len(le.GetLbEndpoints())
		if total > MaxEndpoints {
			return nil, e.at(fmt.Sprintf("%sendpoints[%d].lb_endpoints", prefix, i), "more than %d endpoints in total", MaxEndpoints)
		}
	}
	out.Endpoints = make([]Endpoint, 0, total)
	for i, le := range m.GetEndpoints() {
		f := fmt.Sprintf("%sendpoints[%d]", prefix, i)
		lw := uint32(1)
		if w := le.GetLoadBalancingWeight(); w != nil {
			if w.GetValue() == 0 || w.GetValue() > 1<<16 {
				return nil, e.at(f+".load_balancing_weight", "must be 1..65536, got %d", w.GetValue())
			}
			lw = w.GetValue()
		}
		loc := ""
		if l := le.GetLocality(); l != nil {
			loc = l.GetRegion() + "/" + l.GetZone() + "/" + l.GetSubZone()
		}
		if lc := le.GetLedsClusterLocalityConfig(); lc != nil {
			l, err := decodeLEDSLocality(e, prefix, f, le, lc, out.LEDS)
			if err != nil {
				return nil, err
			}
			l.Weight, l.Priority, l.Locality = lw, le.GetPriority(), loc
			out.LEDS = append(out.LEDS, l)
			continue
		}
		for j, lb := range le.GetLbEndpoints() {
			ep, err := decodeLbEndpoint(e, fmt.Sprintf("%s.lb_endpoints[%d].", f, j), lb)
			if err != nil {
				return nil, err
			}
			md := endpointMeta(le, lb)
			out.Endpoints = append(out.Endpoints, Endpoint{
				Addr:     ep.Addr,
				Weight:   ep.Weight * lw,
				Healthy:  ep.Healthy,
				Priority: le.GetPriority(),
				Locality: loc,
				Peer:     isPeer(md),
				MTLS:     isMTLS(md),
			})
		}
	}
	return out, nil
}

// LbEndpointType is one endpoint of an assignment in LEDS form
// (bootstrap/leds): pilot sends them to a sidecar that advertises
// node.FeatureLEDS, named inside the collection their locality names.
const LbEndpointType = leds.TypeURL

// LEDSLocality is a locality of an assignment in LEDS form: its endpoints are
// the LbEndpoint resources of Collection (ResolveLEDS puts them in).
type LEDSLocality struct {
	Collection string
	Weight     uint32 // load_balancing_weight, 1 when unset
	Priority   uint32
	Locality   string // region/zone/subzone
	// Peer and MTLS are the group's "weft" metadata, which an endpoint's own
	// replaces as a whole.
	Peer, MTLS bool
}

func decodeLEDSLocality(e errs, prefix, f string, le *xdswire.LocalityLbEndpoints, lc *xdswire.LedsClusterLocalityConfig, seen []LEDSLocality) (LEDSLocality, error) {
	if prefix != "" {
		return LEDSLocality{}, e.at(f+".leds_cluster_locality_config", "LEDS is only for an EDS assignment")
	}
	if len(le.GetLbEndpoints()) > 0 {
		return LEDSLocality{}, e.at(f, "both lb_endpoints and leds_cluster_locality_config")
	}
	if lc.GetLedsConfig().GetAds() == nil {
		return LEDSLocality{}, e.at(f+".leds_cluster_locality_config.leds_config", "only ads is supported")
	}
	c := lc.GetLedsCollectionName()
	if len(c) > MaxNameBytes {
		return LEDSLocality{}, e.at(f+".leds_cluster_locality_config.leds_collection_name", "is %d bytes, limit %d", len(c), MaxNameBytes)
	}
	if err := leds.CheckCollection(c); err != nil {
		return LEDSLocality{}, e.at(f+".leds_cluster_locality_config.leds_collection_name", "%v", err)
	}
	for _, o := range seen {
		if o.Collection == c {
			return LEDSLocality{}, e.at(f+".leds_cluster_locality_config.leds_collection_name", "collection %q named by two localities", c)
		}
	}
	md := le.GetMetadata().GetFilterMetadata()[endpointMetadataKey]
	return LEDSLocality{Collection: c, Peer: isPeer(md), MTLS: isMTLS(md)}, nil
}

// LbEndpoint is a decoded endpoint, inline in an assignment or, for
// LbEndpointType, a resource of its own (named by its wrapper: the body
// carries no name).
type LbEndpoint struct {
	Addr    netip.AddrPort
	Weight  uint32 // the endpoint's own, 1..65536
	Healthy bool
	// OwnMeta: the endpoint has its own "weft" metadata (Peer, MTLS), which
	// replaces its group's.
	OwnMeta    bool
	Peer, MTLS bool
}

func decodeLbEndpoint(e errs, ef string, lb *xdswire.LbEndpoint) (LbEndpoint, error) {
	ap, err := socketAddr(e, ef+"endpoint.address.socket_address", lb.GetEndpoint().GetAddress())
	if err != nil {
		return LbEndpoint{}, err
	}
	w := uint32(1)
	if v := lb.GetLoadBalancingWeight(); v != nil {
		if v.GetValue() == 0 || v.GetValue() > 1<<16 {
			return LbEndpoint{}, e.at(ef+"load_balancing_weight", "must be 1..65536, got %d", v.GetValue())
		}
		w = v.GetValue()
	}
	h := lb.GetHealthStatus()
	out := LbEndpoint{Addr: ap, Weight: w, Healthy: h == xdswire.HealthStatus_UNKNOWN || h == xdswire.HealthStatus_HEALTHY || h == xdswire.HealthStatus_DEGRADED}
	if md, ok := lb.GetMetadata().GetFilterMetadata()[endpointMetadataKey]; ok {
		out.OwnMeta, out.Peer, out.MTLS = true, isPeer(md), isMTLS(md)
	}
	return out, nil
}

// decodeLEDSEndpoint decodes one LbEndpointType resource. Its name is its
// wrapper's; Decode returns "" for it.
func decodeLEDSEndpoint(m *xdswire.LbEndpoint) (*LbEndpoint, error) {
	ep, err := decodeLbEndpoint(errs{kind: "LbEndpoint"}, "", m)
	if err != nil {
		return nil, err
	}
	return &ep, nil
}

// ResolveLEDS puts the LbEndpoint resources (name -> *LbEndpoint) into the
// assignments (name -> *Endpoints) whose LEDS localities name their
// collection (bootstrap/leds.CollectionOf), in name order, weighted and
// labelled as an inline endpoint of that locality would be. Assignments
// without LEDS are returned as they are; the others are copies (decoded
// values are shared). An LbEndpoint in no collection an assignment names,
// or whose name is not inside a collection, is an error naming it (a NACK),
// and so is an assignment past MaxEndpoints.
func ResolveLEDS(assignments, lbEndpoints map[string]any) (map[string]any, error) {
	byColl := make(map[string][]string)
	for name := range lbEndpoints {
		c, ok := leds.CollectionOf(name)
		if !ok || leds.CheckCollection(c) != nil {
			return nil, &FieldError{Kind: "LbEndpoint", Name: name, Msg: "name is not <xdstp collection>/<address:port>"}
		}
		byColl[c] = append(byColl[c], name)
	}
	used := make(map[string]bool, len(byColl))
	out := assignments
	copied := false
	for _, name := range slices.Sorted(maps.Keys(assignments)) {
		eps, ok := assignments[name].(*Endpoints)
		if !ok || len(eps.LEDS) == 0 {
			continue
		}
		e := errs{kind: "endpoints", name: name}
		n := len(eps.Endpoints)
		for _, l := range eps.LEDS {
			n += len(byColl[l.Collection])
		}
		if n > MaxEndpoints {
			return nil, e.at("endpoints", "more than %d endpoints in total with its LEDS collections", MaxEndpoints)
		}
		merged := &Endpoints{Name: eps.Name, Endpoints: make([]Endpoint, 0, n)}
		merged.Endpoints = append(merged.Endpoints, eps.Endpoints...)
		for _, l := range eps.LEDS {
			members := byColl[l.Collection]
			slices.Sort(members)
			used[l.Collection] = true
			for _, en := range members {
				lb, ok := lbEndpoints[en].(*LbEndpoint)
				if !ok {
					return nil, &FieldError{Kind: "LbEndpoint", Name: en, Msg: fmt.Sprintf("value is %T, want *xdsresource.LbEndpoint", lbEndpoints[en])}
				}
				peer, mtls := l.Peer, l.MTLS
				if lb.OwnMeta {
					peer, mtls = lb.Peer, lb.MTLS
				}
				merged.Endpoints = append(merged.Endpoints, Endpoint{Addr: lb.Addr, Weight: lb.Weight * l.Weight, Healthy: lb.Healthy,
					Priority: l.Priority, Locality: l.Locality, Peer: peer, MTLS: mtls})
			}
		}
		if !copied {
			out, copied = maps.Clone(assignments), true
		}
		out[name] = merged
	}
	var orphans []string
	for c, names := range byColl {
		if !used[c] {
			orphans = append(orphans, slices.Min(names))
		}
	}
	if len(orphans) > 0 {
		o := slices.Min(orphans)
		c, _ := leds.CollectionOf(o)
		return nil, &FieldError{Kind: "LbEndpoint", Name: o, Msg: fmt.Sprintf("collection %q is named by no ClusterLoadAssignment", c)}
	}
	return out, nil
}

// RateLimitMetadataKey is the cluster filter_metadata key pilot writes a
// DestinationPolicy's localRateLimit under (pilot/xds/gen.RateLimitMetadataKey).
const RateLimitMetadataKey = "weft.localRateLimit"

// decodeOutlier applies Envoy's defaults to absent fields and rejects what Envoy's
// proto validation (percents ≤ 100, durations > 0) and its outlier detector
// (max_ejection_time ≥ base_ejection_time) reject.
func decodeOutlier(e errs, od *xdswire.OutlierDetection) (*Outlier, error) {
	const f = "outlier_detection."
	o := &Outlier{SplitExternalLocalOriginErrors: od.GetSplitExternalLocalOriginErrors()}
	type u32 struct {
		dst  *uint32
		v    *wrapperspb.UInt32Value
		name string
		def  uint32
		pct  bool // a percent: 0..100
	}
	sr := &SuccessRate{}
	fp := &FailurePercentage{}
	var stdev uint32
	for _, s := range []u32{
		{&o.Consecutive5xx, od.GetConsecutive_5Xx(), "consecutive_5xx", 5, false},
		{&o.ConsecutiveGatewayFailure, od.GetConsecutiveGatewayFailure(), "consecutive_gateway_failure", 5, false},
		{&o.ConsecutiveLocalOriginFailure, od.GetConsecutiveLocalOriginFailure(), "consecutive_local_origin_failure", 5, false},
		{&o.EnforcingConsecutive5xx, od.GetEnforcingConsecutive_5Xx(), "enforcing_consecutive_5xx", 100, true},
		{&o.EnforcingConsecutiveGatewayFailure, od.GetEnforcingConsecutiveGatewayFailure(), "enforcing_consecutive_gateway_failure", 0, true},
		{&o.EnforcingConsecutiveLocalOriginFailure, od.GetEnforcingConsecutiveLocalOriginFailure(), "enforcing_consecutive_local_origin_failure", 100, true},
		{&o.MaxEjectionPercent, od.GetMaxEjectionPercent(), "max_ejection_percent", 10, true},
		{&sr.MinimumHosts, od.GetSuccessRateMinimumHosts(), "success_rate_minimum_hosts", 5, false},
		{&sr.RequestVolume, od.GetSuccessRateRequestVolume(), "success_rate_request_volume", 100, false},
		{&stdev, od.GetSuccessRateStdevFactor(), "success_rate_stdev_factor", 1900, false},
		{&sr.Enforcing, od.GetEnforcingSuccessRate(), "enforcing_success_rate", 100, true},
		{&sr.EnforcingLocalOrigin, od.GetEnforcingLocalOriginSuccessRate(), "enforcing_local_origin_success_rate", 100, true},
		{&fp.Threshold, od.GetFailurePercentageThreshold(), "failure_percentage_threshold", 85, true},
		{&fp.MinimumHosts, od.GetFailurePercentageMinimumHosts(), "failure_percentage_minimum_hosts", 5, false},
		{&fp.RequestVolume, od.GetFailurePercentageRequestVolume(), "failure_percentage_request_volume", 50, false},
		{&fp.Enforcing, od.GetEnforcingFailurePercentage(), "enforcing_failure_percentage", 0, true},
		{&fp.EnforcingLocalOrigin, od.GetEnforcingFailurePercentageLocalOrigin(), "enforcing_failure_percentage_local_origin", 0, true},
	} {
		*s.dst = s.def
		if s.v == nil {
			continue
		}
		if s.pct && s.v.GetValue() > 100 {
			return nil, e.at(f+s.name, "must be 0..100, got %d", s.v.GetValue())
		}
		*s.dst = s.v.GetValue()
	}
	sr.StdevFactor = float64(stdev) / 1000
	// A detector no enforcement can apply to is off: the detector need not run.
	if sr.Enforcing > 0 || (o.SplitExternalLocalOriginErrors && sr.EnforcingLocalOrigin > 0) {
		o.SuccessRate = sr
	}
	if fp.Enforcing > 0 || (o.SplitExternalLocalOriginErrors && fp.EnforcingLocalOrigin > 0) {
		o.FailurePercentage = fp
	}
	for _, d := range []struct {
		dst  *time.Duration
		v    *durationpb.Duration
		name string
		def  time.Duration
	}{
		{&o.Interval, od.GetInterval(), "interval", 10 * time.Second},
		{&o.BaseEjectionTime, od.GetBaseEjectionTime(), "base_ejection_time", 30 * time.Second},
		{&o.MaxEjectionTime, od.GetMaxEjectionTime(), "max_ejection_time", 300 * time.Second},
		{&o.MaxEjectionTimeJitter, od.GetMaxEjectionTimeJitter(), "max_ejection_time_jitter", 0},
	} {
		v, err := duration(e, f+d.name, d.v, d.def)
		if err != nil {
			return nil, err
		}
		switch {
		case v == 0 && d.name == "max_ejection_time_jitter":
		case v == 0:
			return nil, e.at(f+d.name, "must be positive")
		case v < MinOutlierDuration || v > MaxOutlierDuration:
			// Envoy works in milliseconds: 500µs would be 0.
			return nil, e.at(f+d.name, "%s outside [%s, %s]", v, MinOutlierDuration, MaxOutlierDuration)
		}
		*d.dst = v
	}
	switch {
	case od.GetMaxEjectionTime() == nil && o.MaxEjectionTime < o.BaseEjectionTime:
		// Envoy: "the default (300s) or base_ejection_time, whichever is larger".
		o.MaxEjectionTime = o.BaseEjectionTime
	case o.MaxEjectionTime < o.BaseEjectionTime:
		return nil, e.at(f+"max_ejection_time", "%s is less than base_ejection_time %s", o.MaxEjectionTime, o.BaseEjectionTime)
	}
	return o, nil
}

// percentValue checks an envoy.type.v3.Percent value (0..100).
func percentValue(e errs, field string, v float64) (float64, error) {
	if !(v >= 0 && v <= 100) { // also rejects NaN
		return 0, e.at(field, "must be 0..100, got %v", v)
	}
	return v, nil
}

// decodeRateLimit reads pilot's {requestsPerSecond, burst, dryRun} struct; nil s: no
// limit. Unknown fields are rejected so a newer pilot's setting is never silently
// ignored.
func decodeRateLimit(e errs, s *structpb.Struct) (*RateLimit, error) {
	if s == nil {
		return nil, nil
	}
	f := "metadata.filter_metadata[\"" + RateLimitMetadataKey + "\"]."
	rl := &RateLimit{}
	for _, k := range slices.Sorted(maps.Keys(s.GetFields())) { // sorted: one bad input, one error
		v := s.GetFields()[k]
		switch k {
		case "requestsPerSecond":
			n, ok := v.GetKind().(*structpb.Value_NumberValue)
			if !ok || !(n.NumberValue > 0 && n.NumberValue <= MaxRateLimitRPS) {
				return nil, e.at(f+k, "must be a number in (0, %g], got %v", float64(MaxRateLimitRPS), v.AsInterface())
			}
			rl.RequestsPerSecond = n.NumberValue
		case "burst":
			n, ok := v.GetKind().(*structpb.Value_NumberValue)
			if !ok || !(n.NumberValue >= 0 && n.NumberValue <= MaxRateLimitBurst) || n.NumberValue != math.Trunc(n.NumberValue) {
				return nil, e.at(f+k, "must be an integer 0..%d, got %v", MaxRateLimitBurst, v.AsInterface())
			}
			rl.Burst = uint32(n.NumberValue)
		case "dryRun":
			b, ok := v.GetKind().(*structpb.Value_BoolValue)
			if !ok {
				return nil, e.at(f+k, "must be a bool, got %v", v.AsInterface())
			}
			rl.DryRun = b.BoolValue
		default:
			return nil, e.at(f+k, "unknown field")
		}
	}
	if rl.RequestsPerSecond == 0 {
		return nil, e.at(f+"requestsPerSecond", "required")
	}
	if rl.Burst == 0 {
		rl.Burst = DefaultBurst(rl.RequestsPerSecond)
	}
	return rl, nil
}
