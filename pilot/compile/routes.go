package compile

import (
	"fmt"
	"slices"
	"sort"
	"strings"

	"github.com/weft-mesh/weft/pilot/ir"
	"github.com/weft-mesh/weft/pilot/resource"
)

// routes attaches each Route's rules to the Services it names. A Route in the
// Service's own namespace is the Service's route for every client (and for
// proxyless clients); a Route in another namespace is that namespace's
// consumer route and applies only to its own sidecars, before the Service's own
// Route. Per (client namespace, Service) the lowest Route name wins; the others
// get a warning. Rules apply to every HTTP-family port (TCP ports are not
// routed).
func (c *compiler) routes() error {
	for _, o := range c.byKind[resource.KindRoute] {
		s, err := specOf[resource.RouteSpec](o)
		if err != nil {
			return err
		}
		ns := o.Metadata.Namespace
		src := ns + "/" + o.Metadata.Name
		for i, h := range s.Hosts {
			svc := c.lookupService(ns, h)
			if svc == nil {
				c.warnf("%s: spec.hosts[%d]: Service %q not found; host ignored", o, i, h)
				continue
			}
			var winner string
			switch {
			case svc.Namespace == ns && svc.RouteSource == src, svc.Consumers[ns] != nil && svc.Consumers[ns].Source == src:
				continue // the same Route names the service twice
			case svc.Namespace == ns && svc.RouteSource != "":
				winner = svc.RouteSource
			case svc.Namespace != ns && svc.Consumers[ns] != nil:
				winner = svc.Consumers[ns].Source
			}
			if winner != "" {
				c.warnf("%s: ignored for Service %s/%s: Route/%s already routes it for namespace %s", o, svc.Namespace, svc.Name, winner, ns)
				continue
			}
			byPort := map[uint32][]*ir.Rule{}
			for _, port := range svc.Ports {
				if !port.Protocol.IsHTTP() {
					continue
				}
				rules, err := c.rules(o, s, port)
				if err != nil {
					return err
				}
				byPort[port.Port] = rules
			}
			if svc.Namespace == ns {
				svc.RouteSource = src
				for _, port := range svc.Ports {
					port.Rules = byPort[port.Port]
				}
				continue
			}
			if svc.Consumers == nil {
				svc.Consumers = map[string]*ir.ConsumerRoute{}
			}
			svc.Consumers[ns] = &ir.ConsumerRoute{Source: src, Rules: byPort}
		}
	}
	return nil
}

func (c *compiler) rules(o *resource.Object, s *resource.RouteSpec, port *ir.Port) ([]*ir.Rule, error) {
	rules := make([]*ir.Rule, 0, len(s.HTTP))
	for i, h := range s.HTTP {
		field := fmt.Sprintf("spec.http[%d]", i)
		r := &ir.Rule{Name: h.Name}
		for j, m := range h.Match {
			mm, err := match(o, fmt.Sprintf("%s.match[%d]", field, j), m)
			if err != nil {
				return nil, err
			}
			r.Matches = append(r.Matches, mm)
		}
		for j, d := range h.Route {
			dfield := fmt.Sprintf("%s.route[%d]", field, j)
			w := d.Weight
			if w == 0 && len(h.Route) == 1 {
				w = 100
			}
			if w < 0 {
				return nil, fmt.Errorf("%s: %s.weight: must not be negative, got %d", o, dfield, w)
			}
			if w == 0 {
				continue // a zero-weight destination receives nothing; leave it out
			}
			name, ok := c.destination(o, dfield+".destination", d.Destination, port)
			if !ok {
				continue
			}
			// Two destinations naming one cluster (e.g. with and without the
			// port) are one weighted cluster; clients reject duplicates.
			if k := slices.IndexFunc(r.Destinations, func(wc ir.WeightedCluster) bool { return wc.Cluster == name }); k >= 0 {
				r.Destinations[k].Weight += uint32(w)
				continue
			}
			r.Destinations = append(r.Destinations, ir.WeightedCluster{Cluster: name, Weight: uint32(w)})
		}
		for j, f := range h.Fallback {
			name, ok := c.destination(o, fmt.Sprintf("%s.fallback[%d].destination", field, j), f.Destination, port)
			if ok && !slices.Contains(r.Fallback, name) {
				r.Fallback = append(r.Fallback, name)
			}
		}
		var err error
		if r.Timeout, err = duration(o, field+".timeout", h.Timeout); err != nil {
			return nil, err
		}
		if rt := h.Retries; rt != nil && rt.Attempts > 0 {
			ptt, err := duration(o, field+".retries.perTryTimeout", rt.PerTryTimeout)
			if err != nil {
				return nil, err
			}
			on := slices.Clone(rt.RetryOn)
			sort.Strings(on)
			r.Retries = &ir.Retries{Attempts: uint32(rt.Attempts), PerTryTimeout: ptt, RetryOn: slices.Compact(on)}
			if b := rt.Backoff; b != nil {
				if err := durations(o, field+".retries.backoff.", dur{"baseInterval", b.BaseInterval, &r.Retries.BackoffBase},
					dur{"maxInterval", b.MaxInterval, &r.Retries.BackoffMax}); err != nil {
					return nil, err
				}
			}
		}
		rules = append(rules, r)
	}
	return rules, nil
}

// destination resolves a Route destination to a cluster name. The port may be
// omitted when the destination Service has one port; otherwise the port being
// routed is assumed. Unresolvable destinations are warnings and are left out (a
// rule left with no destination answers 503).
func (c *compiler) destination(o *resource.Object, field string, d resource.Destination, routed *ir.Port) (string, bool) {
	svc := c.lookupService(o.Metadata.Namespace, d.Service)
	if svc == nil {
		c.warnf("%s: %s.service: Service %q not found; destination left out", o, field, d.Service)
		return "", false
	}
	var port *ir.Port
	switch {
	case d.Port != 0:
		port = svc.PortByNumber(uint32(d.Port))
	case len(svc.Ports) == 1:
		port = svc.Ports[0]
	default:
		port = svc.PortByNumber(routed.Port)
	}
	if port == nil {
		c.warnf("%s: %s.port: Service %s/%s has no port %d; destination left out", o, field, svc.Namespace, svc.Name, cmpOr(uint32(d.Port), routed.Port))
		return "", false
	}
	if !port.Protocol.IsHTTP() {
		c.warnf("%s: %s.port: port %d of Service %s/%s is TCP; an HTTP route cannot target it", o, field, port.Port, svc.Namespace, svc.Name)
		return "", false
	}
	if d.Subset == "" {
		return port.Cluster, true
	}
	name := ir.OutboundClusterName(port.Port, d.Subset, svc.Host)
	if !slices.Contains(port.Subsets, name) {
		c.warnf("%s: %s.subset: Service %s/%s has no subset %q (DestinationPolicy); destination left out", o, field, svc.Namespace, svc.Name, d.Subset)
		return "", false
	}
	return name, true
}

func cmpOr(a, b uint32) uint32 {
	if a != 0 {
		return a
	}
	return b
}

func match(o *resource.Object, field string, m resource.HTTPMatch) (ir.Match, error) {
	var out ir.Match
	if m.Path != nil {
		sm, err := stringMatch(o, field+".path", *m.Path, false)
		if err != nil {
			return out, err
		}
		out.Path = &sm
	}
	for _, name := range ir.SortedKeys(m.Headers) {
		sm, err := stringMatch(o, field+".headers."+name, m.Headers[name], true)
		if err != nil {
			return out, err
		}
		out.Headers = append(out.Headers, ir.HeaderMatch{Name: strings.ToLower(name), StringMatch: sm})
	}
	out.Method = strings.ToUpper(m.Method)
	return out, nil
}

func stringMatch(o *resource.Object, field string, m resource.StringMatch, header bool) (ir.StringMatch, error) {
	var set []ir.StringMatch
	if m.Exact != nil {
		set = append(set, ir.StringMatch{Kind: ir.MatchExact, Value: *m.Exact})
	}
	if m.Prefix != nil {
		set = append(set, ir.StringMatch{Kind: ir.MatchPrefix, Value: *m.Prefix})
	}
	if m.Regex != nil {
		set = append(set, ir.StringMatch{Kind: ir.MatchRegex, Value: *m.Regex})
	}
	if m.Present != nil && header && *m.Present {
		set = append(set, ir.StringMatch{Kind: ir.MatchPresent})
	}
	if len(set) != 1 {
		return ir.StringMatch{}, fmt.Errorf("%s: %s: want exactly one of exact, prefix, regex%s", o, field, map[bool]string{true: ", present"}[header])
	}
	return set[0], nil
}
