package resource

import (
	"fmt"
	"sort"
	"strings"
)

// ValidateSet runs the cross-object checks over every object that will exist
// after an apply (the store passes its current objects merged with the applied
// ones; meshctl validate passes the files). Each object must already have passed
// Validate. Results are in a deterministic order: objects sorted by kind (apply
// order), namespace and name, then by field.
//
// Policy, decided for issue #2:
//
//   - WARNINGS, never blocking: a reference to something that does not exist yet.
//     A Route host or destination naming a missing Service, a destination port
//     the Service lacks (or an omitted port when the Service has several), a
//     subset that no DestinationPolicy for that Service defines, and a
//     DestinationPolicy for a missing Service. Kubernetes users apply in any
//     order (and GitOps tools apply files one by one), so pilot must not refuse a
//     Route before its Service; until the reference resolves, compile treats the
//     destination as having no endpoints (503), which the warning explains.
//   - ERRORS, blocking the apply: one VIP on two Services (issue #10; spec
//     or allocated status addresses); the same key twice in the set; two
//     DestinationPolicies for one Service; two Routes claiming one Service as a
//     host. These are ambiguous, not incomplete: no later apply can make the
//     outcome well-defined, so pilot refuses rather than picking one silently.
//     The later object in the sort order is the one reported.
//   - WARNINGS: a field Weft sidecars do not enforce yet (NotEnforced), on every
//     object that sets it; a connectionPool field only HTTP uses, in a
//     DestinationPolicy whose Service has only TCP ports.
func ValidateSet(objs []*Object) (errs ErrorList, warnings []string) {
	return validateSet(objs, NotEnforced)
}

// validateSet is ValidateSet with the not-enforced table as an argument (tests).
func validateSet(objs []*Object, notEnforced map[string]string) (errs ErrorList, warnings []string) {
	sorted := sortObjects(objs)
	warn := func(o *Object, p path, detail string) {
		warnings = append(warnings, (&FieldError{Object: o.Key().String(), Field: string(p), Detail: detail}).Error())
	}
	fail := func(o *Object, p path, detail string) {
		errs = append(errs, &FieldError{Object: o.Key().String(), Field: string(p), Detail: detail})
	}

	seen := map[Key]bool{}
	services := map[svcRef]*ServiceSpec{}
	policyFor := map[svcRef]*Object{}
	subsets := map[svcRef]map[string]bool{}
	routeFor := map[svcRef]*Object{}
	vipOwner := map[string]*Object{} // address -> the first Service (sort order) with it
	unique := sorted[:0:0]
	for _, o := range sorted {
		if seen[o.Key()] {
			fail(o, "", "duplicate object in the set")
			continue
		}
		seen[o.Key()] = true
		unique = append(unique, o)
		switch s := o.Spec.(type) {
		case *ServiceSpec:
			services[svcRef{o.Metadata.Namespace, o.Metadata.Name}] = s
			p, addrs := ServiceAddresses(o)
			for i, a := range addrs {
				if first, dup := vipOwner[a]; dup {
					fail(o, path(p).index(i), fmt.Sprintf("address %s is already a VIP of Service %s/%s", a, first.Metadata.Namespace, first.Metadata.Name))
					continue
				}
				vipOwner[a] = o
			}
		case *DestinationPolicySpec:
			ref := resolveHost(s.Service, o.Metadata.Namespace)
			if first, dup := policyFor[ref]; dup {
				fail(o, "spec.service", fmt.Sprintf("Service %s already has DestinationPolicy %s/%s", ref, first.Metadata.Namespace, first.Metadata.Name))
				continue
			}
			policyFor[ref] = o
			subsets[ref] = map[string]bool{}
			for _, sub := range s.Subsets {
				subsets[ref][sub.Name] = true
			}
		}
	}

	checkDest := func(o *Object, p path, d Destination) {
		ref := resolveHost(d.Service, o.Metadata.Namespace)
		svc, ok := services[ref]
		if !ok {
			warn(o, p.child("service"), fmt.Sprintf("Service %s does not exist", ref))
			return
		}
		switch {
		case d.Port == 0 && len(svc.Ports) > 1:
			warn(o, p.child("port"), fmt.Sprintf("required: Service %s has %d ports", ref, len(svc.Ports)))
		case d.Port != 0 && !hasPort(svc, d.Port):
			warn(o, p.child("port"), fmt.Sprintf("Service %s has no port %d", ref, d.Port))
		case d.Port != 0 && portProtocol(svc, d.Port) == "TCP", d.Port == 0 && onlyTCP(svc):
			warn(o, p, fmt.Sprintf("not enforced: the port of Service %s is TCP, and an HTTP route cannot target it (destination left out)", ref))
		}
		if d.Subset != "" && !subsets[ref][d.Subset] {
			warn(o, p.child("subset"), fmt.Sprintf("no DestinationPolicy for Service %s defines subset %q", ref, d.Subset))
		}
	}
	for _, o := range unique {
		switch s := o.Spec.(type) {
		case *DestinationPolicySpec:
			ref := resolveHost(s.Service, o.Metadata.Namespace)
			svc, ok := services[ref]
			if !ok && policyFor[ref] == o {
				warn(o, "spec.service", fmt.Sprintf("Service %s does not exist", ref))
			}
			if ok && onlyTCP(svc) {
				for _, f := range httpOnlyPoolFields {
					for _, p := range fieldsSet[f](o) {
						warn(o, p, fmt.Sprintf("not enforced: Service %s has only TCP ports, and a TCP connection has no requests, retries or pending queue (maxConnections applies)", ref))
					}
				}
			}
		case *RouteSpec:
			for i, h := range s.Hosts {
				ref := resolveHost(h, o.Metadata.Namespace)
				hp := path("spec.hosts").index(i)
				if first, dup := routeFor[ref]; dup && first != o {
					fail(o, hp, fmt.Sprintf("Service %s is already routed by Route %s/%s", ref, first.Metadata.Namespace, first.Metadata.Name))
					continue
				}
				routeFor[ref] = o
				switch svc, ok := services[ref]; {
				case !ok:
					warn(o, hp, fmt.Sprintf("Service %s does not exist", ref))
				case onlyTCP(svc):
					warn(o, hp, fmt.Sprintf("not enforced: Service %s has only TCP ports, and Routes apply to HTTP ports", ref))
				}
			}
			for i, r := range s.HTTP {
				rp := path("spec.http").index(i)
				for j, d := range r.Route {
					checkDest(o, rp.child("route").index(j).child("destination"), d.Destination)
				}
				for j, f := range r.Fallback {
					checkDest(o, rp.child("fallback").index(j).child("destination"), f.Destination)
				}
			}
		}
		warnings = append(warnings, notEnforcedWarnings(o, notEnforced)...)
		warnings = append(warnings, unenforcedKindWarnings(o)...)
	}
	return errs, warnings
}

// ServiceAddresses returns a Service object's VIPs and the field they come
// from: spec.addresses when set, else the status.addresses pilot allocated.
func ServiceAddresses(o *Object) (field string, addrs []string) {
	s, ok := o.Spec.(*ServiceSpec)
	switch {
	case !ok || s == nil:
		return "", nil
	case len(s.Addresses) > 0:
		return "spec.addresses", s.Addresses
	case o.Status != nil:
		return "status.addresses", o.Status.Addresses
	}
	return "", nil
}

// httpOnlyPoolFields are the connectionPool fields only HTTP traffic uses: Weft's
// TCP proxy refuses a connection at maxConnections, with no queue.
var httpOnlyPoolFields = []string{
	"spec.connectionPool.maxPendingRequests",
	"spec.connectionPool.maxRequests",
	"spec.connectionPool.maxRetries",
	"spec.connectionPool.retryBudget",
}

// portProtocol is the protocol of s's port (HTTP when unset, as defaulted).
func portProtocol(s *ServiceSpec, port int32) string {
	for _, p := range s.Ports {
		if p.Port == port {
			return p.Protocol
		}
	}
	return ""
}

// onlyTCP reports whether every port of s is TCP (and it has one).
func onlyTCP(s *ServiceSpec) bool {
	for _, p := range s.Ports {
		if p.Protocol != "TCP" {
			return false
		}
	}
	return len(s.Ports) > 0
}

// svcRef names a Service by namespace and name.
type svcRef struct{ ns, name string }

func (r svcRef) String() string { return r.ns + "/" + r.name }

// resolveHost turns "<svc>" or "<svc>.<ns>" into a Service reference relative
// to the referring object's namespace.
func resolveHost(h, ns string) svcRef {
	name, other, qualified := strings.Cut(h, ".")
	if qualified {
		ns = other
	}
	return svcRef{ns: ns, name: name}
}

func hasPort(s *ServiceSpec, port int32) bool {
	for _, p := range s.Ports {
		if p.Port == port {
			return true
		}
	}
	return false
}

// sortObjects returns a copy ordered by kind (registry order), namespace, name;
// stable so duplicates keep their input order.
func sortObjects(objs []*Object) []*Object {
	order := map[string]int{}
	for i, k := range kinds {
		order[k.Kind] = i
	}
	out := append([]*Object(nil), objs...)
	sort.SliceStable(out, func(i, j int) bool {
		a, b := out[i], out[j]
		if order[a.Kind] != order[b.Kind] {
			return order[a.Kind] < order[b.Kind]
		}
		if a.Metadata.Namespace != b.Metadata.Namespace {
			return a.Metadata.Namespace < b.Metadata.Namespace
		}
		return a.Metadata.Name < b.Metadata.Name
	})
	return out
}
