package compile

import (
	"cmp"
	"fmt"
	"slices"
	"time"

	"github.com/weft-mesh/weft/pilot/ir"
	"github.com/weft-mesh/weft/pilot/resource"
)

// security copies the policies sidecars enforce themselves (peer authentication,
// authorization, staleness, overrides) into the mesh with durations parsed. It
// runs before endpoints, which resolve each workload's mTLS mode.
func (c *compiler) security(writeTimes map[int64]time.Time, now time.Time) error {
	wide := map[string]string{} // namespace -> its first namespace-wide PeerAuthentication
	for _, o := range c.byKind[resource.KindPeerAuthentication] {
		s, err := specOf[resource.PeerAuthenticationSpec](o)
		if err != nil {
			return err
		}
		switch s.MTLS {
		case ir.MTLSStrict, ir.MTLSPermissive, ir.MTLSDisable:
		default:
			return fmt.Errorf("%s: spec.mtls: unknown mode %q (want STRICT, PERMISSIVE or DISABLE)", o, s.MTLS)
		}
		ns := o.Metadata.Namespace
		if len(s.Selector) == 0 {
			if first, ok := wide[ns]; ok {
				c.warnf("%s: ignored: %s already applies to the whole namespace", o, first)
				continue
			}
			wide[ns] = o.Key().String()
		}
		c.mesh.PeerAuthn = append(c.mesh.PeerAuthn, &ir.PeerAuthentication{
			Namespace: ns, Name: o.Metadata.Name, Selector: copyLabels(s.Selector), MTLS: s.MTLS,
		})
	}
	c.mesh.Index() // MTLSMode reads the PeerAuthentication index
	for _, o := range c.byKind[resource.KindAuthorizationPolicy] {
		s, err := specOf[resource.AuthorizationPolicySpec](o)
		if err != nil {
			return err
		}
		ap := &ir.AuthorizationPolicy{
			Namespace: o.Metadata.Namespace, Name: o.Metadata.Name, Selector: copyLabels(s.Selector),
			Action: cmp.Or(s.Action, "ALLOW"), DryRun: s.DryRun,
		}
		for i, r := range s.Rules {
			var rule ir.AuthzRule
			for _, f := range r.From {
				rule.From = append(rule.From, ir.AuthzSource{Principals: slices.Clone(f.Principals), Namespaces: slices.Clone(f.Namespaces)})
			}
			for j, t := range r.To {
				op := ir.AuthzOperation{Methods: slices.Clone(t.Methods), Paths: slices.Clone(t.Paths)}
				for k, p := range t.Ports {
					if p <= 0 || p > 65535 {
						return fmt.Errorf("%s: spec.rules[%d].to[%d].ports[%d]: %d out of range 1..65535", o, i, j, k, p)
					}
					op.Ports = append(op.Ports, uint32(p))
				}
				rule.To = append(rule.To, op)
			}
			ap.Rules = append(ap.Rules, rule)
		}
		c.mesh.Authz = append(c.mesh.Authz, ap)
	}
	for _, o := range c.byKind[resource.KindStalenessPolicy] {
		s, err := specOf[resource.StalenessPolicySpec](o)
		if err != nil {
			return err
		}
		sp := &ir.StalenessPolicy{Namespace: o.Metadata.Namespace, Name: o.Metadata.Name, Selector: copyLabels(s.Selector)}
		for i, r := range s.Rules {
			f := fmt.Sprintf("spec.rules[%d].", i)
			rule := ir.StalenessRule{Resource: r.Resource, OnExpire: r.OnExpire, Jitter: r.Jitter}
			if err := durations(o, f,
				dur{"warnAfter", r.WarnAfter, &rule.WarnAfter},
				dur{"restrictAfter", r.RestrictAfter, &rule.RestrictAfter},
				dur{"expireAfter", r.ExpireAfter, &rule.ExpireAfter},
			); err != nil {
				return err
			}
			if err := percent(o, f+"jitter", r.Jitter); err != nil {
				return err
			}
			sp.Rules = append(sp.Rules, rule)
		}
		c.mesh.Staleness = append(c.mesh.Staleness, sp)
	}
	for _, o := range c.byKind[resource.KindOverride] {
		s, err := specOf[resource.OverrideSpec](o)
		if err != nil {
			return err
		}
		ttl, err := duration(o, "spec.ttl", s.TTL)
		if err != nil {
			return err
		}
		if ttl <= 0 {
			return fmt.Errorf("%s: spec.ttl: required and must be > 0", o)
		}
		writtenAt := writeTimes[o.Metadata.Revision]
		if !writtenAt.IsZero() && !now.IsZero() {
			expiry := writtenAt.Add(ttl)
			if !expiry.After(now) {
				continue // expired: it blocks nothing anywhere
			}
			if c.mesh.NextExpiry.IsZero() || expiry.Before(c.mesh.NextExpiry) {
				c.mesh.NextExpiry = expiry
			}
		}
		c.mesh.Overrides = append(c.mesh.Overrides, &ir.Override{
			Namespace: o.Metadata.Namespace, Name: o.Metadata.Name, Revision: o.Metadata.Revision,
			WrittenAt: writtenAt,
			TTL:       ttl, Reason: s.Reason, Action: s.Action,
			Principals: slices.Clone(s.Match.Principals), Paths: slices.Clone(s.Match.Paths), Methods: slices.Clone(s.Match.Methods),
		})
	}
	return nil
}

// scopes computes, per namespace, the services a sidecar in that namespace may
// need: every Service of its own namespace, every Service a Route of its
// namespace names (hosts, destinations, fallbacks), and then, transitively, every
// Service the routes those Services have for that namespace (ir.Service.RulesFor)
// send to, so each route a proxy holds only references clusters it also holds. Sidecars never get the other
// namespaces' services otherwise; proxyless clients get the whole mesh.
func (c *compiler) scopes() {
	seeds := map[string]map[*ir.Service]bool{}
	add := func(ns string, s *ir.Service) {
		if s == nil {
			return
		}
		if seeds[ns] == nil {
			seeds[ns] = map[*ir.Service]bool{}
		}
		seeds[ns][s] = true
	}
	for _, s := range c.mesh.Services {
		add(s.Namespace, s)
	}
	for _, o := range c.byKind[resource.KindRoute] {
		s, ok := o.Spec.(*resource.RouteSpec)
		if !ok || s == nil {
			continue
		}
		ns := o.Metadata.Namespace
		for _, h := range s.Hosts {
			add(ns, c.lookupService(ns, h))
		}
		for _, h := range s.HTTP {
			for _, d := range h.Route {
				add(ns, c.lookupService(ns, d.Destination.Service))
			}
			for _, f := range h.Fallback {
				add(ns, c.lookupService(ns, f.Destination.Service))
			}
		}
	}
	c.mesh.Scopes = make(map[string][]*ir.Service, len(seeds))
	for ns, set := range seeds {
		queue := make([]*ir.Service, 0, len(set))
		for s := range set {
			queue = append(queue, s)
		}
		for len(queue) > 0 {
			s := queue[len(queue)-1]
			queue = queue[:len(queue)-1]
			for _, p := range s.Ports {
				for _, r := range s.RulesFor(ns, p) {
					for _, name := range ruleClusters(r) {
						cl := c.mesh.Cluster(name)
						if cl == nil {
							continue
						}
						if dst := c.mesh.Service(cl.Namespace, cl.Service); dst != nil && !set[dst] {
							set[dst] = true
							queue = append(queue, dst)
						}
					}
				}
			}
		}
		list := make([]*ir.Service, 0, len(set))
		for s := range set {
			list = append(list, s)
		}
		slices.SortFunc(list, func(a, b *ir.Service) int {
			return cmp.Or(cmp.Compare(a.Namespace, b.Namespace), cmp.Compare(a.Name, b.Name))
		})
		c.mesh.Scopes[ns] = list
	}
}

func ruleClusters(r *ir.Rule) []string {
	out := make([]string, 0, len(r.Destinations)+len(r.Fallback))
	for _, d := range r.Destinations {
		out = append(out, d.Cluster)
	}
	return append(out, r.Fallback...)
}
