package xdsclient

import (
	"context"
	"errors"
	"testing"

	discovery "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	"google.golang.org/protobuf/proto"
)

// FuzzHandleResponse feeds raw DiscoveryResponse (sotw) or DeltaDiscoveryResponse
// (delta) bytes to an engine holding a committed state, and checks the protocol
// invariants: an accepted response gets exactly one ACK or NACK first, carrying its
// nonce and type; a NACK leaves the committed state untouched (nothing half
// applied); an ACK commits exactly what Apply accepted.
func FuzzHandleResponse(f *testing.F) {
	f.Add([]byte{}, false)
	f.Fuzz(func(t *testing.T, raw []byte, delta bool) {
		ctx := context.Background()
		var accepted *Update
		ap := func(_ context.Context, u *Update) error {
			if _, ok := u.Resources[TypeListener]["reject"]; ok {
				return errors.New("rejected")
			}
			accepted = u
			return nil
		}
		cfg := testConfig(t, SotW, &applier{})
		cfg.Apply = ap
		cfg.MaxResourcesPerResponse = 50
		if delta {
			cfg.Mode = Delta
		}
		e := newEngine(cfg.withDefaults())
		e.startStream()
		// Seed a committed state through the normal path.
		var typeURL, nonce string
		var handle func() int
		if delta {
			e.initialDelta()
			if reqs := e.handleDelta(ctx, deltaResp(t, TypeListener, "seed", nil, listener("l1", "r1"))); reqs[0].ErrorDetail != nil {
				t.Fatal(reqs[0].ErrorDetail)
			}
			var resp discovery.DeltaDiscoveryResponse
			if proto.Unmarshal(raw, &resp) != nil {
				return
			}
			typeURL, nonce = resp.TypeUrl, resp.Nonce
			handle = func() int {
				reqs := e.handleDelta(ctx, &resp)
				checkFirst(t, len(reqs), func() (string, string, bool) {
					return reqs[0].TypeUrl, reqs[0].ResponseNonce, reqs[0].ErrorDetail != nil
				}, typeURL, nonce)
				if len(reqs) > 0 && reqs[0].ErrorDetail != nil {
					return -1
				}
				return len(reqs)
			}
		} else {
			e.initialSotW()
			if reqs := e.handleSotW(ctx, sotwResp(t, TypeListener, "v0", "seed", listener("l1", "r1"))); reqs[0].ErrorDetail != nil {
				t.Fatal(reqs[0].ErrorDetail)
			}
			var resp discovery.DiscoveryResponse
			if proto.Unmarshal(raw, &resp) != nil {
				return
			}
			typeURL, nonce = resp.TypeUrl, resp.Nonce
			handle = func() int {
				reqs := e.handleSotW(ctx, &resp)
				checkFirst(t, len(reqs), func() (string, string, bool) {
					return reqs[0].TypeUrl, reqs[0].ResponseNonce, reqs[0].ErrorDetail != nil
				}, typeURL, nonce)
				if len(reqs) > 0 && reqs[0].ErrorDetail != nil {
					if want := e.state.Versions[typeURL]; reqs[0].VersionInfo != want {
						t.Fatalf("NACK version_info %q, want last good %q", reqs[0].VersionInfo, want)
					}
					return -1
				}
				return len(reqs)
			}
		}
		before := e.state
		accepted = nil
		switch n := handle(); {
		case n < 0: // NACK
			if e.state != before {
				t.Fatal("NACK changed the committed state")
			}
		case n == 0: // ignored
			if e.state != before {
				t.Fatal("ignored response changed the committed state")
			}
		default:
			if e.state != accepted {
				t.Fatal("ACK committed something other than what Apply accepted")
			}
		}
	})
}

// checkFirst: a response that is not ignored is answered first by its own ACK/NACK.
func checkFirst(t *testing.T, n int, first func() (typeURL, nonce string, nack bool), typeURL, nonce string) {
	t.Helper()
	known := false
	for _, tu := range allTypes {
		known = known || tu == typeURL
	}
	if !known || nonce == "" || nonce == "seed" {
		if n != 0 {
			t.Fatalf("%d requests for an ignored response", n)
		}
		return
	}
	if n == 0 {
		t.Fatal("response neither ACKed nor NACKed")
	}
	if tu, nn, _ := first(); tu != typeURL || nn != nonce {
		t.Fatalf("first request for %s/%s, want %s/%s", tu, nn, typeURL, nonce)
	}
}
