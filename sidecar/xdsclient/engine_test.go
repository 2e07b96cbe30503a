package xdsclient

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/anypb"

	"github.com/weft-mesh/weft/sidecar/xdswire"
	"github.com/weft-mesh/weft/tools/testkit"
)

// corruptAny is a Listener Any whose bytes do not parse.
var corruptAny = &anypb.Any{TypeUrl: TypeListener, Value: []byte{0xff, 0xff, 0xff}}

// corruptErr is the exact proto error for corruptAny, as Decode wraps it.
func corruptErr(t *testing.T) string {
	_, err := corruptAny.UnmarshalNew()
	if err == nil {
		t.Fatal("corrupt Any parsed")
	}
	return "unmarshal: " + err.Error()
}

func newTestEngine(t *testing.T, mode Mode, ap *applier, mutate func(*Config)) *engine {
	cfg := testConfig(t, mode, ap)
	if mutate != nil {
		mutate(&cfg)
	}
	if err := cfg.check(); err != nil {
		t.Fatal(err)
	}
	e := newEngine(cfg.withDefaults())
	e.startStream()
	return e
}

func sotwResp(t *testing.T, typeURL, version, nonce string, ms ...proto.Message) *xdswire.DiscoveryResponse {
	r := &xdswire.DiscoveryResponse{TypeUrl: typeURL, VersionInfo: version, Nonce: nonce}
	for _, m := range ms {
		r.Resources = append(r.Resources, mustAny(t, m))
	}
	return r
}

// outcome is what one response led to, for exact comparison.
type outcome struct {
	Requests  int    // requests sent back
	Nonce     string // nonce of the first request
	Version   string // version_info of the first request (SotW)
	NACK      string // error_detail message, "" for an ACK
	Listeners []string
	Unknown   uint64
	Ignored   uint64
}

func TestSotWResponses(t *testing.T) {
	errApply := errors.New("dataplane: listener l2: route r9 not found")
	tests := []struct {
		name   string
		resp   func(t *testing.T) *xdswire.DiscoveryResponse
		reject error
		max    int
		want   func(t *testing.T) outcome
	}{
		{"good version is ACKed and replaces the set",
			func(t *testing.T) *xdswire.DiscoveryResponse {
				return sotwResp(t, TypeListener, "v2", "n2", listener("l2"), listener("l3"))
			}, nil, 0,
			func(*testing.T) outcome {
				return outcome{Requests: 1, Nonce: "n2", Version: "v2", Listeners: []string{"l2", "l3"}}
			}},
		{"empty LDS deletes all listeners",
			func(t *testing.T) *xdswire.DiscoveryResponse { return sotwResp(t, TypeListener, "v2", "n2") }, nil, 0,
			func(*testing.T) outcome { return outcome{Requests: 1, Nonce: "n2", Version: "v2"} }},
		{"corrupt Any is NACKed, old state kept",
			func(t *testing.T) *xdswire.DiscoveryResponse {
				r := sotwResp(t, TypeListener, "v2", "n2", listener("l2"))
				r.Resources = append(r.Resources, corruptAny)
				return r
			}, nil, 0,
			func(t *testing.T) outcome {
				return outcome{Requests: 1, Nonce: "n2", Version: "v1", NACK: "type Listener: resource #1: " + corruptErr(t), Listeners: []string{"l1"}}
			}},
		{"duplicate names are NACKed",
			func(t *testing.T) *xdswire.DiscoveryResponse {
				return sotwResp(t, TypeListener, "v2", "n2", listener("l2"), listener("l2"))
			}, nil, 0,
			func(*testing.T) outcome {
				return outcome{Requests: 1, Nonce: "n2", Version: "v1", NACK: "type Listener: resource l2: duplicate name in one response", Listeners: []string{"l1"}}
			}},
		{"resource of another type is NACKed",
			func(t *testing.T) *xdswire.DiscoveryResponse {
				return sotwResp(t, TypeListener, "v2", "n2", listener("l2"), cluster("c1"))
			}, nil, 0,
			func(*testing.T) outcome {
				return outcome{Requests: 1, Nonce: "n2", Version: "v1", NACK: `type Listener: resource #1: type_url "` + TypeCluster + `" does not match the response's`, Listeners: []string{"l1"}}
			}},
		{"validation failure names the resource",
			func(t *testing.T) *xdswire.DiscoveryResponse {
				return sotwResp(t, TypeListener, "v2", "n2", listener("l2"), listener("bad-l"))
			}, nil, 0,
			func(*testing.T) outcome {
				return outcome{Requests: 1, Nonce: "n2", Version: "v1", NACK: "type Listener: resource bad-l: invalid", Listeners: []string{"l1"}}
			}},
		{"apply rejection is NACKed with its message",
			func(t *testing.T) *xdswire.DiscoveryResponse {
				return sotwResp(t, TypeListener, "v2", "n2", listener("l2"))
			}, errApply, 0,
			func(*testing.T) outcome {
				return outcome{Requests: 1, Nonce: "n2", Version: "v1", NACK: errApply.Error(), Listeners: []string{"l1"}}
			}},
		{"too many resources",
			func(t *testing.T) *xdswire.DiscoveryResponse {
				return sotwResp(t, TypeListener, "v2", "n2", listener("a"), listener("b"), listener("c"))
			}, nil, 2,
			func(*testing.T) outcome {
				return outcome{Requests: 1, Nonce: "n2", Version: "v1", NACK: "type Listener: response has 3 resources, limit 2", Listeners: []string{"l1"}}
			}},
		{"unknown type is ignored, not NACKed",
			func(t *testing.T) *xdswire.DiscoveryResponse {
				return sotwResp(t, "type.googleapis.com/weft.v1.Unknown", "v2", "n2")
			}, nil, 0,
			func(*testing.T) outcome { return outcome{Listeners: []string{"l1"}, Unknown: 1} }},
		{"empty nonce is ignored",
			func(t *testing.T) *xdswire.DiscoveryResponse {
				return sotwResp(t, TypeListener, "v2", "", listener("l2"))
			}, nil, 0,
			func(*testing.T) outcome { return outcome{Listeners: []string{"l1"}, Ignored: 1} }},
		{"replayed nonce is ignored",
			func(t *testing.T) *xdswire.DiscoveryResponse {
				return sotwResp(t, TypeListener, "v2", "n1", listener("l2"))
			}, nil, 0,
			func(*testing.T) outcome { return outcome{Listeners: []string{"l1"}, Ignored: 1} }},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			ap := &applier{}
			e := newTestEngine(t, SotW, ap, func(c *Config) { c.Types = []string{TypeListener}; c.MaxResourcesPerResponse = tc.max })
			if reqs := e.handleSotW(context.Background(), sotwResp(t, TypeListener, "v1", "n1", listener("l1"))); reqs[0].ErrorDetail != nil {
				t.Fatalf("setup NACKed: %v", reqs[0].ErrorDetail)
			}
			ap.setReject(tc.reject)
			reqs := e.handleSotW(context.Background(), tc.resp(t))
			got := outcome{Requests: len(reqs), Listeners: names(e.state, TypeListener), Unknown: e.unknown, Ignored: e.types[TypeListener].ignored}
			if len(reqs) > 0 {
				got.Nonce, got.Version, got.NACK = reqs[0].ResponseNonce, reqs[0].VersionInfo, reqs[0].GetErrorDetail().GetMessage()
			}
			if diff := cmp.Diff(tc.want(t), got); diff != "" {
				t.Errorf("outcome (-want +got):\n%s", diff)
			}
		})
	}
}

func deltaResp(t *testing.T, typeURL, nonce string, removed []string, ms ...proto.Message) *xdswire.DeltaDiscoveryResponse {
	r := &xdswire.DeltaDiscoveryResponse{TypeUrl: typeURL, Nonce: nonce, SystemVersionInfo: "sys-" + nonce, RemovedResources: removed}
	for _, m := range ms {
		a := mustAny(t, m)
		name, _, _ := testDecode(typeURL, a)
		r.Resources = append(r.Resources, &xdswire.Resource{Name: name, Version: "h-" + name + "-" + nonce, Resource: a})
	}
	return r
}

func TestDeltaResponses(t *testing.T) {
	tests := []struct {
		name string
		resp func(t *testing.T) *xdswire.DeltaDiscoveryResponse
		want func(t *testing.T) outcome
	}{
		{"upsert keeps what is absent",
			func(t *testing.T) *xdswire.DeltaDiscoveryResponse {
				return deltaResp(t, TypeListener, "n2", nil, listener("l2"))
			},
			func(*testing.T) outcome { return outcome{Requests: 1, Nonce: "n2", Listeners: []string{"l1", "l2"}} }},
		{"removal",
			func(t *testing.T) *xdswire.DeltaDiscoveryResponse {
				return deltaResp(t, TypeListener, "n2", []string{"l1"}, listener("l2"))
			},
			func(*testing.T) outcome { return outcome{Requests: 1, Nonce: "n2", Listeners: []string{"l2"}} }},
		{"corrupt Any",
			func(t *testing.T) *xdswire.DeltaDiscoveryResponse {
				r := deltaResp(t, TypeListener, "n2", nil)
				r.Resources = []*xdswire.Resource{{Name: "l2", Version: "x", Resource: corruptAny}}
				return r
			},
			func(t *testing.T) outcome {
				return outcome{Requests: 1, Nonce: "n2", NACK: "type Listener: resource l2: " + corruptErr(t), Listeners: []string{"l1"}}
			}},
		{"duplicate names",
			func(t *testing.T) *xdswire.DeltaDiscoveryResponse {
				return deltaResp(t, TypeListener, "n2", nil, listener("l2"), listener("l2"))
			},
			func(*testing.T) outcome {
				return outcome{Requests: 1, Nonce: "n2", NACK: "type Listener: resource l2: duplicate name in one response", Listeners: []string{"l1"}}
			}},
		{"updated and removed at once",
			func(t *testing.T) *xdswire.DeltaDiscoveryResponse {
				return deltaResp(t, TypeListener, "n2", []string{"l2"}, listener("l2"))
			},
			func(*testing.T) outcome {
				return outcome{Requests: 1, Nonce: "n2", NACK: "type Listener: resource l2: both updated and removed", Listeners: []string{"l1"}}
			}},
		{"mismatched type",
			func(t *testing.T) *xdswire.DeltaDiscoveryResponse {
				r := deltaResp(t, TypeListener, "n2", nil)
				r.Resources = []*xdswire.Resource{{Name: "c1", Version: "x", Resource: mustAny(t, cluster("c1"))}}
				return r
			},
			func(*testing.T) outcome {
				return outcome{Requests: 1, Nonce: "n2", NACK: `type Listener: resource c1: type_url "` + TypeCluster + `" does not match the response's`, Listeners: []string{"l1"}}
			}},
		{"wrapper name differs from body",
			func(t *testing.T) *xdswire.DeltaDiscoveryResponse {
				r := deltaResp(t, TypeListener, "n2", nil, listener("l2"))
				r.Resources[0].Name = "l3"
				return r
			},
			func(*testing.T) outcome {
				return outcome{Requests: 1, Nonce: "n2", NACK: `type Listener: resource l3: body is named "l2"`, Listeners: []string{"l1"}}
			}},
		{"no body",
			func(t *testing.T) *xdswire.DeltaDiscoveryResponse {
				r := deltaResp(t, TypeListener, "n2", nil, listener("l2"))
				r.Resources[0].Resource = nil
				return r
			},
			func(*testing.T) outcome {
				return outcome{Requests: 1, Nonce: "n2", NACK: "type Listener: resource l2: no resource body", Listeners: []string{"l1"}}
			}},
		{"validation failure",
			func(t *testing.T) *xdswire.DeltaDiscoveryResponse {
				return deltaResp(t, TypeListener, "n2", nil, listener("bad-x"))
			},
			func(*testing.T) outcome {
				return outcome{Requests: 1, Nonce: "n2", NACK: "type Listener: resource bad-x: invalid", Listeners: []string{"l1"}}
			}},
		{"unknown type ignored",
			func(t *testing.T) *xdswire.DeltaDiscoveryResponse {
				return deltaResp(t, "type.googleapis.com/weft.v1.Unknown", "n2", nil)
			},
			func(*testing.T) outcome { return outcome{Listeners: []string{"l1"}, Unknown: 1} }},
		{"replayed nonce ignored",
			func(t *testing.T) *xdswire.DeltaDiscoveryResponse {
				return deltaResp(t, TypeListener, "n1", []string{"l1"})
			},
			func(*testing.T) outcome { return outcome{Listeners: []string{"l1"}, Ignored: 1} }},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			ap := &applier{}
			e := newTestEngine(t, Delta, ap, func(c *Config) { c.Types = []string{TypeListener} })
			if reqs := e.handleDelta(context.Background(), deltaResp(t, TypeListener, "n1", nil, listener("l1"))); reqs[0].ErrorDetail != nil {
				t.Fatalf("setup NACKed: %v", reqs[0].ErrorDetail)
			}
			reqs := e.handleDelta(context.Background(), tc.resp(t))
			got := outcome{Requests: len(reqs), Listeners: names(e.state, TypeListener), Unknown: e.unknown, Ignored: e.types[TypeListener].ignored}
			if len(reqs) > 0 {
				got.Nonce, got.NACK = reqs[0].ResponseNonce, reqs[0].GetErrorDetail().GetMessage()
			}
			if diff := cmp.Diff(tc.want(t), got); diff != "" {
				t.Errorf("outcome (-want +got):\n%s", diff)
			}
		})
	}
}

// TestSubscriptionsFollowReferences: named types are requested by the names the
// committed state references, and unreferenced ones are pruned in the same candidate.
func TestSubscriptionsFollowReferences(t *testing.T) {
	ctx := context.Background()
	t.Run("sotw", func(t *testing.T) {
		ap := &applier{}
		e := newTestEngine(t, SotW, ap, nil)
		init := e.initialSotW()
		if got, want := typeURLs(init), []string{TypeCluster, TypeListener}; !cmp.Equal(got, want) {
			t.Fatalf("initial requests for %v, want %v (named types wait for references)", got, want)
		}
		if init[0].Node.GetId() != "sidecar-1" || init[1].Node != nil {
			t.Fatalf("node must be on the first request only")
		}
		reqs := e.handleSotW(ctx, sotwResp(t, TypeListener, "v1", "1", listener("l1", "r1")))
		if got := sotwSummary(reqs); !cmp.Equal(got, []string{"Listener nonce=1 v=v1 []", "RouteConfiguration nonce= v= [r1]"}) {
			t.Fatalf("after LDS: %v", got)
		}
		reqs = e.handleSotW(ctx, sotwResp(t, TypeRoute, "v1", "2", route("r1")))
		if got := sotwSummary(reqs); !cmp.Equal(got, []string{"RouteConfiguration nonce=2 v=v1 [r1]"}) {
			t.Fatalf("after RDS: %v", got)
		}
		reqs = e.handleSotW(ctx, sotwResp(t, TypeListener, "v2", "3", listener("l1", "r2")))
		if got := sotwSummary(reqs); !cmp.Equal(got, []string{"Listener nonce=3 v=v2 []", "RouteConfiguration nonce=2 v=v1 [r2]"}) {
			t.Fatalf("after LDS v2: %v", got)
		}
		last := ap.calls[len(ap.calls)-1]
		if got := names(last, TypeRoute); len(got) != 0 {
			t.Fatalf("r1 not pruned from candidate: %v", got)
		}
		if !cmp.Equal(last.Missing, map[string][]string{TypeRoute: {"r2"}}) {
			t.Fatalf("missing = %v", last.Missing)
		}
	})
	t.Run("delta", func(t *testing.T) {
		ap := &applier{}
		e := newTestEngine(t, Delta, ap, nil)
		if got := typeURLs(e.initialDelta()); !cmp.Equal(got, []string{TypeCluster, TypeListener}) {
			t.Fatalf("initial requests for %v", got)
		}
		reqs := e.handleDelta(ctx, deltaResp(t, TypeCluster, "1", nil, cluster("c1")))
		if got := deltaSummary(reqs); !cmp.Equal(got, []string{"Cluster nonce=1 +[] -[]", "ClusterLoadAssignment nonce= +[c1] -[]"}) {
			t.Fatalf("after CDS: %v", got)
		}
		reqs = e.handleDelta(ctx, deltaResp(t, TypeCluster, "2", []string{"c1"}, cluster("c2")))
		if got := deltaSummary(reqs); !cmp.Equal(got, []string{"Cluster nonce=2 +[] -[]", "ClusterLoadAssignment nonce= +[c2] -[c1]"}) {
			t.Fatalf("after CDS 2: %v", got)
		}
	})
}

func typeURLs[R interface{ GetTypeUrl() string }](reqs []R) []string {
	var out []string
	for _, r := range reqs {
		out = append(out, r.GetTypeUrl())
	}
	return out
}

func sotwSummary(reqs []*xdswire.DiscoveryRequest) []string {
	var out []string
	for _, r := range reqs {
		out = append(out, fmt.Sprintf("%s nonce=%s v=%s %v", ShortName(r.TypeUrl), r.ResponseNonce, r.VersionInfo, r.ResourceNames))
	}
	return out
}

func deltaSummary(reqs []*xdswire.DeltaDiscoveryRequest) []string {
	var out []string
	for _, r := range reqs {
		out = append(out, fmt.Sprintf("%s nonce=%s +%v -%v", ShortName(r.TypeUrl), r.ResponseNonce, r.ResourceNamesSubscribe, r.ResourceNamesUnsubscribe))
	}
	return out
}

// TestInitialState: a client seeded with last-known-good announces it.
func TestInitialState(t *testing.T) {
	init := &Update{
		Resources: map[string]map[string]Resource{
			TypeListener: {"l1": {Name: "l1", Version: "h1", Value: testListener{routes: []string{"r1"}}}},
			TypeRoute:    {"r1": {Name: "r1", Version: "h2", Value: "r1"}},
		},
		Versions: map[string]string{TypeListener: "v7", TypeRoute: "v7"},
	}
	ap := &applier{}
	e := newTestEngine(t, Delta, ap, func(c *Config) { c.Initial = init })
	got := map[string]map[string]string{}
	for _, r := range e.initialDelta() {
		got[ShortName(r.TypeUrl)] = r.InitialResourceVersions
	}
	want := map[string]map[string]string{"Cluster": nil, "Listener": {"l1": "h1"}, "RouteConfiguration": {"r1": "h2"}}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Fatalf("initial_resource_versions (-want +got):\n%s", diff)
	}
	e = newTestEngine(t, SotW, ap, func(c *Config) { c.Initial = init })
	if got := sotwSummary(e.initialSotW()); !cmp.Equal(got, []string{"Cluster nonce= v= []", "Listener nonce= v=v7 []", "RouteConfiguration nonce= v=v7 [r1]"}) {
		t.Fatalf("sotw initial: %v", got)
	}
}

func TestConfigErrors(t *testing.T) {
	ap := &applier{}
	tests := []struct {
		name   string
		mutate func(*Config)
		want   string
	}{
		{"no node", func(c *Config) { c.Node = nil }, "xdsclient: invalid config: node: required"},
		{"no servers", func(c *Config) { c.Servers = nil }, "xdsclient: invalid config: servers: at least one required"},
		{"empty server", func(c *Config) { c.Servers = []string{"a:1", ""} }, "xdsclient: invalid config: servers[1]: empty"},
		{"bad mode", func(c *Config) { c.Mode = 7 }, "xdsclient: invalid config: mode: Mode(7) unknown"},
		{"no types", func(c *Config) { c.Types = nil }, "xdsclient: invalid config: types: at least one required"},
		{"dup type", func(c *Config) { c.Types = []string{TypeListener, TypeListener} }, "xdsclient: invalid config: types[1]: " + TypeListener + " listed twice"},
		{"no decode", func(c *Config) { c.Decode = nil }, "xdsclient: invalid config: decode: required"},
		{"no apply", func(c *Config) { c.Apply = nil }, "xdsclient: invalid config: apply: required"},
		{"no logger", func(c *Config) { c.Logger = nil }, "xdsclient: invalid config: logger: required"},
		{"backoff", func(c *Config) { c.Backoff = Backoff{Initial: 2, Max: 1} }, "xdsclient: invalid config: backoff: want 0 <= initial <= max, got 2ns..1ns"},
		{"negative limit", func(c *Config) { c.MaxResourcesPerResponse = -1 }, "xdsclient: invalid config: maxResourcesPerResponse: negative"},
		{"initial type", func(c *Config) {
			c.Types = []string{TypeListener}
			c.Initial = &Update{Resources: map[string]map[string]Resource{TypeCluster: {}}}
		}, "xdsclient: invalid config: initial: type " + TypeCluster + " is not in types"},
		{"confirmed without initial", func(c *Config) { c.InitialConfirmed = time.Unix(1, 0) }, "xdsclient: invalid config: initialConfirmed: set without initial"},
		{"bad node", func(c *Config) { c.Node.Address = "nope" }, `xdsclient: invalid config: node sidecar-1: address: "nope" is not an IP literal`},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			cfg := testConfig(t, Delta, ap)
			tc.mutate(&cfg)
			_, err := New(cfg)
			if err == nil || err.Error() != tc.want || !errors.Is(err, ErrConfig) {
				t.Fatalf("err = %v, want %q", err, tc.want)
			}
		})
	}
}

func TestBackoffBounds(t *testing.T) {
	c, err := New(testConfig(t, Delta, &applier{}))
	if err != nil {
		t.Fatal(err)
	}
	for round, capd := range map[int]int64{0: 10e6, 1: 20e6, 3: 80e6, 4: 100e6, 50: 100e6} {
		for range 200 {
			if d := c.backoff(round); d < 0 || int64(d) > capd {
				t.Fatalf("round %d: backoff %v outside [0, %v]", round, d, capd)
			}
		}
	}
}

// TestSotWResendOfRejected: go-control-plane's SotW cache resends a NACKed version in
// a loop; an identical resend is NACKed again without decoding, until the committed
// state changes.
func TestSotWResendOfRejected(t *testing.T) {
	ctx := context.Background()
	ap := &applier{}
	decodes := 0
	e := newTestEngine(t, SotW, ap, func(c *Config) {
		c.Decode = func(typeURL string, a *anypb.Any) (string, any, error) {
			decodes++
			return testDecode(typeURL, a)
		}
	})
	e.handleSotW(ctx, sotwResp(t, TypeCluster, "v1", "1", cluster("c1")))
	bad := func(nonce string) []*xdswire.DiscoveryRequest {
		return e.handleSotW(ctx, sotwResp(t, TypeListener, "v2", nonce, listener("bad-l")))
	}
	const want = "type Listener: resource bad-l: invalid"
	decodes = 0
	for i, nonce := range []string{"2", "3", "4"} {
		reqs := bad(nonce)
		if got := reqs[0].GetErrorDetail().GetMessage(); got != want || reqs[0].ResponseNonce != nonce {
			t.Fatalf("resend %d: NACK %q nonce %q", i, got, reqs[0].ResponseNonce)
		}
	}
	if decodes != 1 {
		t.Fatalf("decoded %d times, want 1", decodes)
	}
	if n := e.types[TypeListener].nacks; n != 3 {
		t.Fatalf("%d NACKs counted, want 3", n)
	}
	// The committed state changes: the same response is judged again.
	e.handleSotW(ctx, sotwResp(t, TypeCluster, "v2", "5", cluster("c2")))
	bad("6")
	if decodes != 3 { // c2 + bad-l again
		t.Fatalf("decoded %d times after a state change, want 3", decodes)
	}
}

func TestRunTwice(t *testing.T) {
	c, err := New(testConfig(t, Delta, &applier{}))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- c.Run(ctx) }()
	testkit.Eventually(t, waitTimeout, "running", func() bool { return c.running.Load() })
	if err := c.Run(ctx); !errors.Is(err, ErrRunning) {
		t.Fatalf("second Run: %v, want ErrRunning", err)
	}
	cancel()
	if err := <-done; !errors.Is(err, context.Canceled) {
		t.Fatalf("Run: %v", err)
	}
}

// TestLastConfirmedClock: the confirmation clock starts at InitialConfirmed, runs
// only while a stream is up long enough with nothing rejected, and stops when the
// stream ends.
func TestLastConfirmedClock(t *testing.T) {
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	cfg := testConfig(t, Delta, &applier{})
	cfg.Initial = &Update{Resources: map[string]map[string]Resource{TypeListener: {"l1": {Name: "l1", Version: "h"}}}}
	cfg.InitialConfirmed = t0
	cfg.ConfirmAfter = time.Second
	c, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	at := func(d time.Duration) time.Time { return t0.Add(d) }
	steps := []struct {
		name string
		do   func()
		now  time.Time
		want time.Time
	}{
		{"from disk", func() {}, at(time.Hour), t0},
		{"stream just up", func() { c.streamUp(at(time.Hour)) }, at(time.Hour + 999*time.Millisecond), t0},
		{"stream up ConfirmAfter", func() {}, at(time.Hour + time.Second), at(time.Hour + time.Second)},
		{"keeps confirming", func() {}, at(2 * time.Hour), at(2 * time.Hour)},
		{"NACK stops it", func() { c.mu.Lock(); c.nacked = true; c.mu.Unlock() }, at(3 * time.Hour), t0},
		{"recovered", func() { c.mu.Lock(); c.nacked = false; c.mu.Unlock() }, at(3 * time.Hour), at(3 * time.Hour)},
		{"stream down freezes", func() { c.streamDown(at(4 * time.Hour)) }, at(9 * time.Hour), at(4 * time.Hour)},
		{"short stream confirms nothing", func() { c.streamUp(at(10 * time.Hour)); c.streamDown(at(10*time.Hour + 500*time.Millisecond)) }, at(11 * time.Hour), at(4 * time.Hour)},
	}
	for _, s := range steps {
		s.do()
		if got := c.LastConfirmed(s.now); !got.Equal(s.want) {
			t.Fatalf("%s: LastConfirmed = %v, want %v", s.name, got, s.want)
		}
	}
}

// TestNoncesPerType: nonces are per type on a shared ADS stream. A response whose
// nonce sorts before another type's is not stale; each ACK and subscription update
// carries its own type's latest nonce.
func TestNoncesPerType(t *testing.T) {
	ctx := context.Background()
	e := newTestEngine(t, SotW, &applier{}, nil)
	e.initialSotW()
	reqs := e.handleSotW(ctx, sotwResp(t, TypeListener, "v1", "9", listener("l1", "r1")))
	if got := sotwSummary(reqs); !cmp.Equal(got, []string{"Listener nonce=9 v=v1 []", "RouteConfiguration nonce= v= [r1]"}) {
		t.Fatalf("after LDS: %v", got)
	}
	reqs = e.handleSotW(ctx, sotwResp(t, TypeCluster, "v1", "3", cluster("c1")))
	if got := sotwSummary(reqs); !cmp.Equal(got, []string{"Cluster nonce=3 v=v1 []", "ClusterLoadAssignment nonce= v= [c1]"}) {
		t.Fatalf("after CDS with a lower nonce: %v", got)
	}
	reqs = e.handleSotW(ctx, sotwResp(t, TypeRoute, "v1", "1", route("r1")))
	if got := sotwSummary(reqs); !cmp.Equal(got, []string{"RouteConfiguration nonce=1 v=v1 [r1]"}) {
		t.Fatalf("after RDS: %v", got)
	}
	if a := e.types[TypeListener].acks + e.types[TypeCluster].acks + e.types[TypeRoute].acks; a != 3 {
		t.Fatalf("%d ACKs, want 3", a)
	}
}
