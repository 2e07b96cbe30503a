package acktrack

import (
	"testing"
	"time"

	discoveryv3 "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	"github.com/google/go-cmp/cmp"
	"go.uber.org/goleak"
	rpcstatus "google.golang.org/genproto/googleapis/rpc/status"
	"google.golang.org/protobuf/testing/protocmp"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

const (
	lds = listenerType
	cds = clusterType
	eds = "type.googleapis.com/envoy.config.endpoint.v3.ClusterLoadAssignment"
)

func set(names ...string) map[string]struct{} {
	m := map[string]struct{}{}
	for _, n := range names {
		m[n] = struct{}{}
	}
	return m
}

var (
	now  = time.Unix(1700000000, 0)
	nack = &rpcstatus.Status{Code: 3, Message: "bad listener"}
)

func TestClassifySotW(t *testing.T) {
	started := State{Started: true, Nonce: "7", Explicit: true, Subscribed: set("a", "b")}
	wild := State{Started: true, Nonce: "7", Wildcard: true}
	tests := []struct {
		name        string
		st          State
		req         *discoveryv3.DiscoveryRequest
		kind        Kind
		answer      Answer
		added, rmvd []string
		next        State
	}{
		{"initial LDS with no names is the legacy wildcard", State{},
			&discoveryv3.DiscoveryRequest{TypeUrl: lds},
			Initial, NoAnswer, []string{"*"}, nil, State{Started: true, Wildcard: true, Subscribed: set()}},
		{"initial EDS with no names is the legacy wildcard too", State{},
			&discoveryv3.DiscoveryRequest{TypeUrl: eds},
			Initial, NoAnswer, []string{"*"}, nil, State{Started: true, Wildcard: true}},
		{"wildcard EDS acked with no names stays wildcard", State{Started: true, Nonce: "7", Wildcard: true},
			&discoveryv3.DiscoveryRequest{TypeUrl: eds, ResponseNonce: "7"},
			ACK, AckAnswer, nil, nil, State{Started: true, Nonce: "7", Wildcard: true}},
		{"initial explicit names", State{},
			&discoveryv3.DiscoveryRequest{TypeUrl: eds, ResourceNames: []string{"b", "a"}},
			Initial, NoAnswer, []string{"a", "b"}, nil, State{Started: true, Explicit: true, Subscribed: set("a", "b")}},
		{"initial explicit * plus a name", State{},
			&discoveryv3.DiscoveryRequest{TypeUrl: cds, ResourceNames: []string{"*", "x"}},
			Initial, NoAnswer, []string{"*", "x"}, nil, State{Started: true, Wildcard: true, Explicit: true, Subscribed: set("x")}},
		{"initial after reconnect carries an old nonce: stale answer, still initial", State{},
			&discoveryv3.DiscoveryRequest{TypeUrl: eds, ResourceNames: []string{"a"}, VersionInfo: "v1", ResponseNonce: "99"},
			Initial, StaleAnswer, []string{"a"}, nil, State{Started: true, Explicit: true, Subscribed: set("a")}},
		{"ack of the latest nonce", started,
			&discoveryv3.DiscoveryRequest{TypeUrl: eds, ResourceNames: []string{"a", "b"}, VersionInfo: "v2", ResponseNonce: "7"},
			ACK, AckAnswer, nil, nil, started},
		{"nack of the latest nonce", started,
			&discoveryv3.DiscoveryRequest{TypeUrl: eds, ResourceNames: []string{"a", "b"}, VersionInfo: "v1", ResponseNonce: "7", ErrorDetail: nack},
			NACK, NackAnswer, nil, nil, started},
		{"nack that also subscribes is a NACK carrying Added", started,
			&discoveryv3.DiscoveryRequest{TypeUrl: eds, ResourceNames: []string{"a", "b", "c"}, ResponseNonce: "7", ErrorDetail: nack},
			NACK, NackAnswer, []string{"c"}, nil, State{Started: true, Nonce: "7", Explicit: true, Subscribed: set("a", "b", "c")}},
		{"stale nonce: whole request ignored even with new names", started,
			&discoveryv3.DiscoveryRequest{TypeUrl: eds, ResourceNames: []string{"z"}, ResponseNonce: "6"},
			Stale, StaleAnswer, nil, nil, started},
		{"stale nack ignored", started,
			&discoveryv3.DiscoveryRequest{TypeUrl: eds, ResourceNames: []string{"a", "b"}, ResponseNonce: "5", ErrorDetail: nack},
			Stale, StaleAnswer, nil, nil, started},
		{"ack plus new name is a resubscribe", started,
			&discoveryv3.DiscoveryRequest{TypeUrl: eds, ResourceNames: []string{"a", "b", "c"}, ResponseNonce: "7"},
			Resubscribe, AckAnswer, []string{"c"}, nil, State{Started: true, Nonce: "7", Explicit: true, Subscribed: set("a", "b", "c")}},
		{"ack dropping a name is an unsubscribe", started,
			&discoveryv3.DiscoveryRequest{TypeUrl: eds, ResourceNames: []string{"a"}, ResponseNonce: "7"},
			Unsubscribe, AckAnswer, nil, []string{"b"}, State{Started: true, Nonce: "7", Explicit: true, Subscribed: set("a")}},
		{"empty list after explicit names unsubscribes everything, not wildcard", State{Started: true, Nonce: "7", Explicit: true, Subscribed: set("l1")},
			&discoveryv3.DiscoveryRequest{TypeUrl: lds, ResponseNonce: "7"},
			Unsubscribe, AckAnswer, nil, []string{"l1"}, State{Started: true, Nonce: "7", Explicit: true, Subscribed: set()}},
		{"swap names: added and removed", started,
			&discoveryv3.DiscoveryRequest{TypeUrl: eds, ResourceNames: []string{"a", "c"}, ResponseNonce: "7"},
			Resubscribe, AckAnswer, []string{"c"}, []string{"b"}, State{Started: true, Nonce: "7", Explicit: true, Subscribed: set("a", "c")}},
		{"legacy wildcard ack keeps the wildcard", wild,
			&discoveryv3.DiscoveryRequest{TypeUrl: cds, ResponseNonce: "7", VersionInfo: "v"},
			ACK, AckAnswer, nil, nil, wild},
		{"wildcard client names a resource: wildcard dropped", wild,
			&discoveryv3.DiscoveryRequest{TypeUrl: cds, ResourceNames: []string{"c1"}, ResponseNonce: "7"},
			Resubscribe, AckAnswer, []string{"c1"}, []string{"*"}, State{Started: true, Nonce: "7", Explicit: true, Subscribed: set("c1")}},
		{"no nonce, same names after a send: unchanged", started,
			&discoveryv3.DiscoveryRequest{TypeUrl: eds, ResourceNames: []string{"a", "b"}},
			Unchanged, NoAnswer, nil, nil, started},
		{"no nonce, new name: resubscribe", started,
			&discoveryv3.DiscoveryRequest{TypeUrl: eds, ResourceNames: []string{"a", "b", "d"}},
			Resubscribe, NoAnswer, []string{"d"}, nil, State{Started: true, Nonce: "7", Explicit: true, Subscribed: set("a", "b", "d")}},
		{"started but nothing sent yet: a nonce is stale", State{Started: true, Explicit: true, Subscribed: set("a")},
			&discoveryv3.DiscoveryRequest{TypeUrl: eds, ResourceNames: []string{"a"}, ResponseNonce: "3"},
			Stale, StaleAnswer, nil, nil, State{Started: true, Explicit: true, Subscribed: set("a")}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			r := ClassifySotW(tc.st, tc.req, now)
			expect(t, r, Result{Kind: tc.kind, Answer: tc.answer, Added: tc.added, Removed: tc.rmvd, State: tc.next})
			if !r.At.Equal(now) || r.Nonce != tc.req.GetResponseNonce() {
				t.Errorf("at/nonce = %v/%q", r.At, r.Nonce)
			}
			wantDetail := (*rpcstatus.Status)(nil)
			if tc.answer == NackAnswer {
				wantDetail = tc.req.GetErrorDetail()
			}
			if d := cmp.Diff(wantDetail, r.ErrorDetail, protocmp.Transform()); d != "" {
				t.Errorf("error detail (-want +got):\n%s", d)
			}
		})
	}
}

// expect compares the classification fields of a Result (not At, Nonce or
// ErrorDetail, which the callers check where they matter).
func expect(t *testing.T, got, want Result) {
	t.Helper()
	if got.Kind != want.Kind || got.Answer != want.Answer {
		t.Fatalf("kind/answer = %v/%d, want %v/%d", got.Kind, got.Answer, want.Kind, want.Answer)
	}
	if d := cmp.Diff(want.Added, got.Added); d != "" {
		t.Errorf("added (-want +got):\n%s", d)
	}
	if d := cmp.Diff(want.Removed, got.Removed); d != "" {
		t.Errorf("removed (-want +got):\n%s", d)
	}
	if d := cmp.Diff(want.Initial, got.Initial); d != "" {
		t.Errorf("initial (-want +got):\n%s", d)
	}
	if d := cmp.Diff(want.State, got.State, cmp.Comparer(sameSet)); d != "" {
		t.Errorf("state (-want +got):\n%s", d)
	}
}

func sameSet(a, b map[string]struct{}) bool {
	if len(a) != len(b) {
		return false
	}
	for k := range a {
		if _, ok := b[k]; !ok {
			return false
		}
	}
	return true
}

func TestClassifyDelta(t *testing.T) {
	started := State{Started: true, Nonce: "4", Subscribed: set("a", "b")}
	wild := State{Started: true, Nonce: "4", Wildcard: true, Subscribed: set()}
	wildPlus := State{Started: true, Nonce: "4", Wildcard: true, Subscribed: set("a")}
	tests := []struct {
		name        string
		st          State
		req         *discoveryv3.DeltaDiscoveryRequest
		kind        Kind
		answer      Answer
		added, rmvd []string
		initial     map[string]string
		next        State
	}{
		{"initial empty request is the legacy wildcard", State{},
			&discoveryv3.DeltaDiscoveryRequest{TypeUrl: eds},
			Initial, NoAnswer, []string{"*"}, nil, nil, State{Started: true, Wildcard: true}},
		{"initial explicit with initial_resource_versions", State{},
			&discoveryv3.DeltaDiscoveryRequest{TypeUrl: eds, ResourceNamesSubscribe: []string{"a", "b"}, InitialResourceVersions: map[string]string{"a": "v1"}},
			Initial, NoAnswer, []string{"a", "b"}, nil, map[string]string{"a": "v1"}, State{Started: true, Subscribed: set("a", "b")}},
		{"initial explicit *", State{},
			&discoveryv3.DeltaDiscoveryRequest{TypeUrl: cds, ResourceNamesSubscribe: []string{"*"}},
			Initial, NoAnswer, []string{"*"}, nil, nil, State{Started: true, Wildcard: true}},
		{"ack", started,
			&discoveryv3.DeltaDiscoveryRequest{TypeUrl: eds, ResponseNonce: "4"},
			ACK, AckAnswer, nil, nil, nil, started},
		{"nack", started,
			&discoveryv3.DeltaDiscoveryRequest{TypeUrl: eds, ResponseNonce: "4", ErrorDetail: nack},
			NACK, NackAnswer, nil, nil, nil, started},
		{"stale ack is ignored", started,
			&discoveryv3.DeltaDiscoveryRequest{TypeUrl: eds, ResponseNonce: "3"},
			Stale, StaleAnswer, nil, nil, nil, started},
		{"stale nonce still applies a subscribe", started,
			&discoveryv3.DeltaDiscoveryRequest{TypeUrl: eds, ResponseNonce: "3", ResourceNamesSubscribe: []string{"c"}},
			Resubscribe, StaleAnswer, []string{"c"}, nil, nil, State{Started: true, Nonce: "4", Subscribed: set("a", "b", "c")}},
		{"spontaneous subscribe without nonce", started,
			&discoveryv3.DeltaDiscoveryRequest{TypeUrl: eds, ResourceNamesSubscribe: []string{"c", "a"}},
			Resubscribe, NoAnswer, []string{"c"}, nil, nil, State{Started: true, Nonce: "4", Subscribed: set("a", "b", "c")}},
		{"unsubscribe", started,
			&discoveryv3.DeltaDiscoveryRequest{TypeUrl: eds, ResourceNamesUnsubscribe: []string{"b"}},
			Unsubscribe, NoAnswer, nil, []string{"b"}, nil, State{Started: true, Nonce: "4", Subscribed: set("a")}},
		{"unsubscribe of a name never subscribed is ignored", started,
			&discoveryv3.DeltaDiscoveryRequest{TypeUrl: eds, ResourceNamesUnsubscribe: []string{"zz"}},
			Unchanged, NoAnswer, nil, nil, nil, started},
		{"resubscribe a name already subscribed changes nothing", started,
			&discoveryv3.DeltaDiscoveryRequest{TypeUrl: eds, ResourceNamesSubscribe: []string{"a"}},
			Unchanged, NoAnswer, nil, nil, nil, started},
		{"unsubscribe the wildcard", wild,
			&discoveryv3.DeltaDiscoveryRequest{TypeUrl: cds, ResourceNamesUnsubscribe: []string{"*"}},
			Unsubscribe, NoAnswer, nil, []string{"*"}, nil, State{Started: true, Nonce: "4", Subscribed: set()}},
		{"unsubscribe explicit name still under wildcard", wildPlus,
			&discoveryv3.DeltaDiscoveryRequest{TypeUrl: cds, ResourceNamesUnsubscribe: []string{"a"}},
			Unsubscribe, NoAnswer, nil, []string{"a"}, nil, State{Started: true, Nonce: "4", Wildcard: true, Subscribed: set()}},
		{"ack with subscribe and unsubscribe", started,
			&discoveryv3.DeltaDiscoveryRequest{TypeUrl: eds, ResponseNonce: "4", ResourceNamesSubscribe: []string{"c"}, ResourceNamesUnsubscribe: []string{"a"}},
			Resubscribe, AckAnswer, []string{"c"}, []string{"a"}, nil, State{Started: true, Nonce: "4", Subscribed: set("b", "c")}},
		{"later empty request does not turn on the wildcard", started,
			&discoveryv3.DeltaDiscoveryRequest{TypeUrl: eds},
			Unchanged, NoAnswer, nil, nil, nil, started},
		{"initial_resource_versions after the first request are ignored", started,
			&discoveryv3.DeltaDiscoveryRequest{TypeUrl: eds, InitialResourceVersions: map[string]string{"a": "v"}},
			Unchanged, NoAnswer, nil, nil, nil, started},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			before := len(tc.st.Subscribed)
			r := ClassifyDelta(tc.st, tc.req, now)
			expect(t, r, Result{Kind: tc.kind, Answer: tc.answer, Added: tc.added, Removed: tc.rmvd, State: tc.next, Initial: tc.initial})
			if len(tc.st.Subscribed) != before {
				t.Errorf("input state mutated: %d names, was %d", len(tc.st.Subscribed), before)
			}
		})
	}
}

func TestSentAndIsSubscribed(t *testing.T) {
	st := State{Started: true, Subscribed: set("a")}.Sent("9")
	if st.Nonce != "9" {
		t.Fatalf("nonce = %q, want 9", st.Nonce)
	}
	for _, tc := range []struct {
		st   State
		name string
		want bool
	}{{st, "a", true}, {st, "b", false}, {State{Wildcard: true}, "b", true}} {
		if got := tc.st.IsSubscribed(tc.name); got != tc.want {
			t.Errorf("IsSubscribed(%q) = %v, want %v", tc.name, got, tc.want)
		}
	}
	for k, want := range map[Kind]string{Initial: "initial", NACK: "nack", Resubscribe: "resubscribe", Unsubscribe: "unsubscribe", ACK: "ack", Stale: "stale", Unchanged: "unchanged", 0: "unknown"} {
		if k.String() != want {
			t.Errorf("%d.String() = %q, want %q", k, k.String(), want)
		}
	}
}
