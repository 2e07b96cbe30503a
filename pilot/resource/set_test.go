package resource

import (
	"math/rand/v2"
	"testing"

	"github.com/google/go-cmp/cmp"
)

func TestValidateSet(t *testing.T) {
	svc := func(ns, name string, ports ...int32) *Object {
		s := &ServiceSpec{}
		for _, p := range ports {
			s.Ports = append(s.Ports, ServicePort{Name: "p" + string(rune('a'+len(s.Ports))), Port: p})
		}
		return object(KindService, meta(ns, name), s)
	}
	dp := func(ns, name, service string, subsets ...string) *Object {
		s := &DestinationPolicySpec{Service: service}
		for _, n := range subsets {
			s.Subsets = append(s.Subsets, Subset{Name: n, Labels: map[string]string{"version": n}})
		}
		return object(KindDestinationPolicy, meta(ns, name), s)
	}
	route := func(ns, name string, hosts []string, d ...Destination) *Object {
		s := &RouteSpec{Hosts: hosts, HTTP: []HTTPRoute{{}}}
		for _, x := range d {
			s.HTTP[0].Route = append(s.HTTP[0].Route, RouteDestination{Destination: x})
		}
		s.HTTP[0].Route[0].Weight = 100
		s.HTTP[0].Fallback = []FallbackDestination{{Destination: d[0]}}
		return object(KindRoute, meta(ns, name), s)
	}
	for _, tc := range []struct {
		name         string
		objs         []*Object
		wantErrs     []string
		wantWarnings []string
	}{
		{name: "empty"},
		{
			name: "consistent",
			objs: []*Object{
				svc("shop", "reviews", 9080), svc("other", "ratings", 9090, 9091), dp("shop", "reviews", "reviews", "v1"),
				route("shop", "reviews", []string{"reviews", "ratings.other"}, Destination{Service: "reviews", Subset: "v1"}, Destination{Service: "ratings.other", Port: 9091}),
			},
		},
		{
			name: "missing_references_warn",
			objs: []*Object{
				svc("shop", "reviews", 9080, 9081), dp("shop", "reviews", "reviews", "v1"), dp("shop", "ghost", "ghost"),
				route("shop", "r", []string{"nope", "reviews"},
					Destination{Service: "nope"}, Destination{Service: "reviews"}, Destination{Service: "reviews", Port: 1}, Destination{Service: "reviews", Port: 9080, Subset: "v2"}),
			},
			wantWarnings: []string{
				"DestinationPolicy/shop/ghost: spec.service: Service shop/ghost does not exist",
				"Route/shop/r: spec.hosts[0]: Service shop/nope does not exist",
				"Route/shop/r: spec.http[0].route[0].destination.service: Service shop/nope does not exist",
				"Route/shop/r: spec.http[0].route[1].destination.port: required: Service shop/reviews has 2 ports",
				"Route/shop/r: spec.http[0].route[2].destination.port: Service shop/reviews has no port 1",
				`Route/shop/r: spec.http[0].route[3].destination.subset: no DestinationPolicy for Service shop/reviews defines subset "v2"`,
				"Route/shop/r: spec.http[0].fallback[0].destination.service: Service shop/nope does not exist",
			},
		},
		{
			name: "ambiguity_errors",
			objs: []*Object{
				svc("shop", "reviews", 9080), svc("shop", "reviews", 9080),
				dp("shop", "b", "reviews"), dp("shop", "a", "reviews.shop"),
				route("shop", "r1", []string{"reviews"}, Destination{Service: "reviews"}),
				route("shop", "r2", []string{"reviews.shop"}, Destination{Service: "reviews"}),
			},
			wantErrs: []string{
				"Service/shop/reviews: duplicate object in the set",
				"DestinationPolicy/shop/b: spec.service: Service shop/reviews already has DestinationPolicy shop/a",
				"Route/shop/r2: spec.hosts[0]: Service shop/reviews is already routed by Route shop/r1",
			},
		},
		{
			name: "vip_on_two_services",
			objs: []*Object{
				withVIPs(svc("shop", "a", 80), "240.240.0.1", "fd00::1"),
				withVIPs(svc("shop", "b", 80), "240.240.0.2"),
				withVIPs(svc("other", "c", 80), "fd00::1", "240.240.0.3"),
				withStatus(svc("shop", "d", 80), "240.240.0.2"),
				withStatus(svc("shop", "e", 80), "240.240.0.4"),
			},
			wantErrs: []string{
				"Service/shop/a: spec.addresses[1]: address fd00::1 is already a VIP of Service other/c",
				"Service/shop/d: status.addresses[0]: address 240.240.0.2 is already a VIP of Service shop/b",
			},
		},
		{
			name: "spec_addresses_win_over_status",
			objs: []*Object{
				withStatus(withVIPs(svc("shop", "a", 80), "240.240.0.9"), "240.240.0.1"),
				withStatus(svc("shop", "b", 80), "240.240.0.1"),
			},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			for _, o := range tc.objs {
				ApplyDefaults(o)
				if err := Validate(o); err != nil {
					t.Fatalf("test object invalid: %v", err)
				}
			}
			// The result must not depend on input order.
			for range 5 {
				errs, warnings := ValidateSet(tc.objs)
				var got []string
				for _, e := range errs {
					got = append(got, e.Error())
				}
				if diff := cmp.Diff(tc.wantErrs, got); diff != "" {
					t.Errorf("errors (-want +got):\n%s", diff)
				}
				if diff := cmp.Diff(tc.wantWarnings, warnings); diff != "" {
					t.Errorf("warnings (-want +got):\n%s", diff)
				}
				rand.Shuffle(len(tc.objs), func(i, j int) { tc.objs[i], tc.objs[j] = tc.objs[j], tc.objs[i] })
			}
		})
	}
}

func withVIPs(o *Object, addrs ...string) *Object {
	o.Spec.(*ServiceSpec).Addresses = addrs
	return o
}

func withStatus(o *Object, addrs ...string) *Object {
	o.Status = &Status{Addresses: addrs}
	return o
}
