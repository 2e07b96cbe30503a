package acktrack

import (
	"testing"

	discoveryv3 "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	"google.golang.org/protobuf/proto"
)

// Requests come off the wire: the classifier must hold its invariants for any
// decodable request and any prior state.

func stateFrom(b byte) State {
	st := State{Started: b&1 != 0, Wildcard: b&2 != 0, Explicit: b&4 != 0, Subscribed: map[string]struct{}{}}
	if b&8 != 0 {
		st.Nonce = "7"
	}
	if b&16 != 0 {
		st.Subscribed["a"] = struct{}{}
	}
	if b&32 != 0 {
		st.Subscribed["b"] = struct{}{}
	}
	return st
}

func checkResult(t *testing.T, st State, before int, r Result) {
	t.Helper()
	if len(st.Subscribed) != before {
		t.Fatalf("input state mutated")
	}
	if _, ok := r.State.Subscribed[Wildcard]; ok {
		t.Fatalf("%q stored as an explicit name", Wildcard)
	}
	rm := map[string]bool{}
	for _, n := range r.Removed {
		rm[n] = true
	}
	for _, n := range r.Added {
		if rm[n] {
			t.Fatalf("%q both added and removed", n)
		}
	}
	if !r.State.Started {
		t.Fatal("state not started after a request")
	}
	if (r.Answer == NackAnswer) != (r.ErrorDetail != nil) {
		t.Fatalf("answer %d with error detail %v", r.Answer, r.ErrorDetail)
	}
	if r.Kind == Stale && r.Answer != StaleAnswer {
		t.Fatalf("stale kind with answer %d", r.Answer)
	}
	if (r.Kind == Initial) != !st.Started {
		t.Fatalf("kind %v for started=%v", r.Kind, st.Started)
	}
}

func FuzzClassifyDelta(f *testing.F) {
	for _, r := range []*discoveryv3.DeltaDiscoveryRequest{
		{TypeUrl: clusterType, ResourceNamesSubscribe: []string{"*", "a"}},
		{TypeUrl: clusterType, ResponseNonce: "7", ResourceNamesUnsubscribe: []string{"a", "*"}},
		{TypeUrl: clusterType, ResponseNonce: "6", InitialResourceVersions: map[string]string{"a": "v"}},
	} {
		b, _ := proto.Marshal(r)
		f.Add(byte(0), b)
		f.Add(byte(0x3f), b)
	}
	f.Fuzz(func(t *testing.T, sb byte, data []byte) {
		req := &discoveryv3.DeltaDiscoveryRequest{}
		if proto.Unmarshal(data, req) != nil {
			return
		}
		st := stateFrom(sb)
		before := len(st.Subscribed)
		r := ClassifyDelta(st, req, now)
		checkResult(t, st, before, r)
		for _, n := range req.GetResourceNamesSubscribe() {
			if n != Wildcard && !r.State.IsSubscribed(n) && !contains(req.GetResourceNamesUnsubscribe(), n) {
				t.Fatalf("subscribed %q is not subscribed after the request", n)
			}
		}
	})
}

func FuzzClassifySotW(f *testing.F) {
	for _, r := range []*discoveryv3.DiscoveryRequest{
		{TypeUrl: listenerType},
		{TypeUrl: clusterType, ResponseNonce: "7", VersionInfo: "v", ResourceNames: []string{"a", "*"}},
		{TypeUrl: "x", ResponseNonce: "7", ResourceNames: []string{"b"}},
	} {
		b, _ := proto.Marshal(r)
		f.Add(byte(0), b)
		f.Add(byte(0x3f), b)
	}
	f.Fuzz(func(t *testing.T, sb byte, data []byte) {
		req := &discoveryv3.DiscoveryRequest{}
		if proto.Unmarshal(data, req) != nil {
			return
		}
		st := stateFrom(sb)
		before := len(st.Subscribed)
		r := ClassifySotW(st, req, now)
		if r.Kind == Stale {
			if r.State.Started != st.Started || len(r.State.Subscribed) != before {
				t.Fatal("a stale request changed the state")
			}
			return
		}
		checkResult(t, st, before, r)
		for _, n := range req.GetResourceNames() {
			if !r.State.IsSubscribed(n) && n != Wildcard {
				t.Fatalf("named %q is not subscribed", n)
			}
		}
	})
}

func contains(s []string, n string) bool {
	for _, x := range s {
		if x == n {
			return true
		}
	}
	return false
}
