package gen

import (
	"errors"
	"fmt"
	"slices"

	clusterv3 "github.com/envoyproxy/go-control-plane/envoy/config/cluster/v3"
	endpointv3 "github.com/envoyproxy/go-control-plane/envoy/config/endpoint/v3"
	listenerv3 "github.com/envoyproxy/go-control-plane/envoy/config/listener/v3"
	routev3 "github.com/envoyproxy/go-control-plane/envoy/config/route/v3"
	hcmv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/network/http_connection_manager/v3"
	tcpv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/network/tcp_proxy/v3"
	"github.com/weft-mesh/weft/bootstrap/leds"
	"github.com/weft-mesh/weft/pilot/xds/snapshot"
	"google.golang.org/protobuf/proto"
)

// Consistent checks a snapshot's cross references: every route configuration a
// listener names exists, every cluster a route, fallback chain or tcp_proxy names
// exists, every EDS cluster has a ClusterLoadAssignment of its name, and in
// LEDS form every collection an assignment names is well formed and every
// LbEndpoint is in one of them. It also
// checks what Envoy rejects within one resource: a domain in two virtual hosts
// of a route configuration, two filter chains with the same match. It
// decodes every resource, so it is for tests and debugging, not the push path.
func Consistent(s *snapshot.Snapshot) error {
	var errs []error
	has := func(typ, name string) bool { _, ok := s.Resources[typ][name]; return ok }
	needCluster := func(from, name string) {
		if !has(snapshot.ClusterType, name) {
			errs = append(errs, fmt.Errorf("%s references cluster %q, which the snapshot lacks", from, name))
		}
	}
	checkRC := func(from string, rc *routev3.RouteConfiguration) {
		domains := map[string]string{}
		for _, vh := range rc.GetVirtualHosts() {
			for _, d := range vh.GetDomains() {
				if other, dup := domains[d]; dup {
					errs = append(errs, fmt.Errorf("%s: domain %q is in virtual hosts %q and %q", from, d, other, vh.GetName()))
				}
				domains[d] = vh.GetName()
			}
			for _, r := range vh.GetRoutes() {
				ra := r.GetRoute()
				if c := ra.GetCluster(); c != "" {
					needCluster(from, c)
				}
				for _, wc := range ra.GetWeightedClusters().GetClusters() {
					needCluster(from, wc.GetName())
				}
				for _, v := range r.GetMetadata().GetFilterMetadata()[FallbackMetadataKey].GetFields()["clusters"].GetListValue().GetValues() {
					needCluster(from+" fallback", v.GetStringValue())
				}
			}
		}
	}
	checkHCM := func(from string, h *hcmv3.HttpConnectionManager) {
		if rds := h.GetRds(); rds != nil {
			if !has(snapshot.RouteType, rds.GetRouteConfigName()) {
				errs = append(errs, fmt.Errorf("%s references route configuration %q, which the snapshot lacks", from, rds.GetRouteConfigName()))
			}
		}
		if rc := h.GetRouteConfig(); rc != nil {
			checkRC(from, rc)
		}
	}
	for name, r := range s.Resources[snapshot.ListenerType] {
		l := &listenerv3.Listener{}
		if err := r.Any.UnmarshalTo(l); err != nil {
			errs = append(errs, fmt.Errorf("listener %q: %w", name, err))
			continue
		}
		from := "listener " + name
		if l.GetName() != name {
			errs = append(errs, fmt.Errorf("%s: carries name %q", from, l.GetName()))
		}
		if al := l.GetApiListener().GetApiListener(); al != nil {
			h := &hcmv3.HttpConnectionManager{}
			if err := al.UnmarshalTo(h); err != nil {
				errs = append(errs, fmt.Errorf("%s: api_listener: %w", from, err))
			} else {
				checkHCM(from, h)
			}
		}
		chains := l.GetFilterChains()
		if d := l.GetDefaultFilterChain(); d != nil {
			chains = append(slices.Clone(chains), d)
		}
		for i, fc := range chains {
			for _, prev := range chains[:i] {
				if fc != l.GetDefaultFilterChain() && proto.Equal(prev.GetFilterChainMatch(), fc.GetFilterChainMatch()) {
					errs = append(errs, fmt.Errorf("%s: filter chains %q and %q have the same match", from, prev.GetName(), fc.GetName()))
				}
			}
			for _, f := range fc.GetFilters() {
				switch m, err := f.GetTypedConfig().UnmarshalNew(); {
				case err != nil:
					errs = append(errs, fmt.Errorf("%s: filter %s: %w", from, f.GetName(), err))
				default:
					switch m := m.(type) {
					case *hcmv3.HttpConnectionManager:
						checkHCM(from, m)
					case *tcpv3.TcpProxy:
						needCluster(from, m.GetCluster())
					}
				}
			}
		}
	}
	for name, r := range s.Resources[snapshot.RouteType] {
		rc := &routev3.RouteConfiguration{}
		if err := r.Any.UnmarshalTo(rc); err != nil {
			errs = append(errs, fmt.Errorf("route configuration %q: %w", name, err))
			continue
		}
		if rc.GetName() != name {
			errs = append(errs, fmt.Errorf("route configuration %q: carries name %q", name, rc.GetName()))
		}
		checkRC("route configuration "+name, rc)
	}
	for name, r := range s.Resources[snapshot.ClusterType] {
		c := &clusterv3.Cluster{}
		if err := r.Any.UnmarshalTo(c); err != nil {
			errs = append(errs, fmt.Errorf("cluster %q: %w", name, err))
			continue
		}
		if c.GetName() != name {
			errs = append(errs, fmt.Errorf("cluster %q: carries name %q", name, c.GetName()))
		}
		if c.GetType() == clusterv3.Cluster_EDS {
			eds := c.GetEdsClusterConfig().GetServiceName()
			if eds == "" {
				eds = name
			}
			if !has(snapshot.EndpointType, eds) {
				errs = append(errs, fmt.Errorf("EDS cluster %q has no ClusterLoadAssignment %q", name, eds))
			}
		}
	}
	errs = append(errs, consistentLEDS(s)...)
	for typ, byName := range s.Resources {
		for name, r := range byName {
			if r.Name != name || r.Any.GetTypeUrl() != typ {
				errs = append(errs, fmt.Errorf("%s %q: stored as %s %q", typ, name, r.Any.GetTypeUrl(), r.Name))
			}
		}
	}
	return errors.Join(errs...)
}

func consistentLEDS(s *snapshot.Snapshot) []error {
	var errs []error
	colls := map[string]string{} // collection -> assignment naming it
	for name, r := range s.Resources[snapshot.EndpointType] {
		cla := &endpointv3.ClusterLoadAssignment{}
		if err := r.Any.UnmarshalTo(cla); err != nil {
			errs = append(errs, fmt.Errorf("assignment %q: %w", name, err))
			continue
		}
		for i, le := range cla.GetEndpoints() {
			lc := le.GetLedsClusterLocalityConfig()
			if lc == nil {
				continue
			}
			c := lc.GetLedsCollectionName()
			if err := leds.CheckCollection(c); err != nil {
				errs = append(errs, fmt.Errorf("assignment %q: endpoints[%d]: %w", name, i, err))
			}
			if other, dup := colls[c]; dup {
				errs = append(errs, fmt.Errorf("assignment %q: collection %q is also named by %q", name, c, other))
			}
			colls[c] = name
			if len(le.GetLbEndpoints()) > 0 {
				errs = append(errs, fmt.Errorf("assignment %q: endpoints[%d]: both lb_endpoints and a LEDS collection", name, i))
			}
		}
	}
	for name, r := range s.Resources[snapshot.LbEndpointType] {
		ep := &endpointv3.LbEndpoint{}
		if err := r.Any.UnmarshalTo(ep); err != nil {
			errs = append(errs, fmt.Errorf("LbEndpoint %q: %w", name, err))
			continue
		}
		if c, ok := leds.CollectionOf(name); !ok || colls[c] == "" {
			errs = append(errs, fmt.Errorf("LbEndpoint %q is in no collection an assignment names", name))
		}
	}
	return errs
}
