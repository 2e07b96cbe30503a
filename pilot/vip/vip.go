// Package vip allocates Service VIPs (issue #10): a Service applied without
// spec.addresses keeps the status.addresses it has stored, or gets the lowest
// free address of MeshConfig.serviceAddressRange. It is pure: pilot's apply
// path (pilot/api) calls Assign with the stored objects and the mutations,
// under its write lock and with the store's head revision as a precondition,
// so two applies can never take one address.
package vip

import (
	"fmt"
	"net/netip"
	"slices"
	"strings"

	"github.com/weft-mesh/weft/pilot/resource"
	"github.com/weft-mesh/weft/pilot/store"
)

// Assign returns muts with the status of every Service PUT decided:
//   - spec.addresses set: no status (the user's VIPs are the Service's);
//   - else the stored object's status.addresses, when it has them (stable
//     across applies, restarts and range changes: an allocated VIP never
//     moves while its Service exists);
//   - else one address, the lowest of the range (network and broadcast
//     skipped) that no Service of the resulting store has, spec or status,
//     given in key order within one apply.
//
// The range is the serviceAddressRange of the MeshConfig the apply leaves
// (one in muts, else the stored one, else resource.DefaultServiceAddressRange).
// current is every stored object. Objects in muts are not changed: a
// Service whose status changes is a copy. A full range is an error naming
// the Service and the range (a resource.ErrorList).
func Assign(current []*resource.Object, muts []store.Mutation) ([]store.Mutation, error) {
	stored := make(map[resource.Key]*resource.Object, len(current))
	for _, o := range current {
		stored[o.Key()] = o
	}
	after := make(map[resource.Key]*resource.Object, len(current)+len(muts))
	for k, o := range stored {
		after[k] = o
	}
	out := slices.Clone(muts)
	var pending []int // indexes in out of Services that need an address
	for i, m := range out {
		k := m.Object.Key()
		if m.Op == store.OpDelete {
			delete(after, k)
			continue
		}
		if m.Object.Kind == resource.KindService {
			o := withStatus(m.Object, keptStatus(m.Object, stored[k]))
			out[i].Object = o
			if _, addrs := resource.ServiceAddresses(o); len(addrs) == 0 {
				pending = append(pending, i)
			}
		}
		after[k] = out[i].Object
	}
	if len(pending) == 0 {
		return out, nil
	}
	rng, err := addressRange(after)
	if err != nil {
		return nil, err
	}
	used := map[netip.Addr]bool{}
	for _, o := range after {
		_, addrs := resource.ServiceAddresses(o)
		for _, a := range addrs {
			if ip, err := netip.ParseAddr(a); err == nil {
				used[ip] = true
			}
		}
	}
	slices.SortFunc(pending, func(a, b int) int { return strings.Compare(out[a].Object.Key().String(), out[b].Object.Key().String()) })
	var errs resource.ErrorList
	for _, i := range pending {
		ip, ok := LowestFree(rng, used)
		if !ok {
			errs = append(errs, &resource.FieldError{Object: out[i].Object.Key().String(), Field: "status.addresses",
				Detail: fmt.Sprintf("no free address in serviceAddressRange %s (%d allocatable, all in use): delete a Service, give this one spec.addresses, or widen MeshConfig/default spec.serviceAddressRange", rng, Allocatable(rng))})
			continue
		}
		used[ip] = true
		out[i].Object = withStatus(out[i].Object, &resource.Status{Addresses: []string{ip.String()}})
	}
	if len(errs) > 0 {
		return nil, errs
	}
	return out, nil
}

// keptStatus is the status a Service PUT keeps: none with spec.addresses,
// else the stored object's allocated addresses.
func keptStatus(o, old *resource.Object) *resource.Status {
	if s, ok := o.Spec.(*resource.ServiceSpec); !ok || len(s.Addresses) > 0 {
		return nil
	}
	if old == nil || old.Status == nil || len(old.Status.Addresses) == 0 {
		return nil
	}
	return &resource.Status{Addresses: slices.Clone(old.Status.Addresses)}
}

// withStatus is o with status st: o itself when it already has it, else a
// shallow copy (objects handed in are shared and not written).
func withStatus(o *resource.Object, st *resource.Status) *resource.Object {
	if o.Status == nil && st == nil || o.Status != nil && st != nil && slices.Equal(o.Status.Addresses, st.Addresses) {
		return o
	}
	c := *o
	c.Status = st
	return &c
}

// addressRange is the serviceAddressRange of the MeshConfig in objs (the
// default without one).
func addressRange(objs map[resource.Key]*resource.Object) (netip.Prefix, error) {
	r := resource.DefaultServiceAddressRange
	k := resource.Key{Kind: resource.KindMeshConfig, Name: resource.DefaultMeshConfigName}
	if o := objs[k]; o != nil {
		if s, ok := o.Spec.(*resource.MeshConfigSpec); ok && s.ServiceAddressRange != "" {
			r = s.ServiceAddressRange
		}
	}
	p, err := resource.ParseServiceAddressRange(r)
	if err != nil {
		return netip.Prefix{}, resource.ErrorList{&resource.FieldError{Object: k.String(), Field: "spec.serviceAddressRange", Detail: err.Error()}}
	}
	return p, nil
}

// LowestFree is the lowest address of rng that is not its network or
// broadcast address and not in used; false when there is none. It looks at
// no more than len(used)+1 candidates.
func LowestFree(rng netip.Prefix, used map[netip.Addr]bool) (netip.Addr, bool) {
	rng = rng.Masked()
	last := broadcast(rng)
	for a := rng.Addr().Next(); a.IsValid() && rng.Contains(a) && a != last; a = a.Next() {
		if !used[a] {
			return a, true
		}
	}
	return netip.Addr{}, false
}

// Allocatable is how many addresses rng gives (all but network and
// broadcast), for messages.
func Allocatable(rng netip.Prefix) uint64 {
	host := rng.Addr().BitLen() - rng.Bits()
	if host >= 64 {
		return 1<<64 - 1
	}
	n := uint64(1) << host
	if n < 2 {
		return 0
	}
	return n - 2
}

// broadcast is the last address of p (all host bits set).
func broadcast(p netip.Prefix) netip.Addr {
	b := p.Addr().AsSlice()
	for i := p.Bits(); i < len(b)*8; i++ {
		b[i/8] |= 0x80 >> (i % 8)
	}
	a, _ := netip.AddrFromSlice(b)
	return a
}
