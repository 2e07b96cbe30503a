package xdsclient

import (
	"context"
	"errors"
	"testing"

	statuspb "google.golang.org/genproto/googleapis/rpc/status"
	"google.golang.org/protobuf/proto"

	"github.com/weft-mesh/weft/sidecar/xdswire"
)

// answer summarises the requests an engine sent back for one response.
type answer struct {
	n       int
	typeURL string
	nonce   string
	nack    bool
	version string // SotW version_info of the first request
}

type request interface {
	GetTypeUrl() string
	GetResponseNonce() string
	GetErrorDetail() *statuspb.Status
}

func summarize[R request](reqs []R, version func(R) string) answer {
	a := answer{n: len(reqs)}
	if len(reqs) > 0 {
		a.typeURL, a.nonce, a.nack, a.version = reqs[0].GetTypeUrl(), reqs[0].GetResponseNonce(), reqs[0].GetErrorDetail() != nil, version(reqs[0])
	}
	return a
}

// FuzzHandleResponse feeds raw DiscoveryResponse (sotw) or DeltaDiscoveryResponse
// (delta) bytes to an engine holding a committed state, and checks the protocol
// invariants: an accepted response gets exactly one ACK or NACK first, carrying its
// nonce and type; a NACK leaves the committed state untouched (nothing half
// applied) and, in SotW, carries the last good version; an ACK commits exactly what
// Apply accepted.
func FuzzHandleResponse(f *testing.F) {
	f.Add([]byte{}, false)
	f.Fuzz(func(t *testing.T, raw []byte, delta bool) {
		ctx := context.Background()
		var accepted *Update
		cfg := testConfig(t, SotW, &applier{})
		cfg.Apply = func(_ context.Context, u *Update) error {
			if _, ok := u.Resources[TypeListener]["reject"]; ok {
				return errors.New("rejected")
			}
			accepted = u
			return nil
		}
		cfg.MaxResourcesPerResponse = 50
		if delta {
			cfg.Mode = Delta
		}
		e := newEngine(cfg.withDefaults())
		e.startStream()
		var typeURL, nonce string
		var handle func() answer
		if delta {
			e.initialDelta()
			e.handleDelta(ctx, deltaResp(t, TypeListener, "seed", nil, listener("l1", "r1")))
			var resp xdswire.DeltaDiscoveryResponse
			if proto.Unmarshal(raw, &resp) != nil {
				return
			}
			typeURL, nonce = resp.TypeUrl, resp.Nonce
			handle = func() answer {
				return summarize(e.handleDelta(ctx, &resp), func(*xdswire.DeltaDiscoveryRequest) string { return "" })
			}
		} else {
			e.initialSotW()
			e.handleSotW(ctx, sotwResp(t, TypeListener, "v0", "seed", listener("l1", "r1")))
			var resp xdswire.DiscoveryResponse
			if proto.Unmarshal(raw, &resp) != nil {
				return
			}
			typeURL, nonce = resp.TypeUrl, resp.Nonce
			handle = func() answer {
				return summarize(e.handleSotW(ctx, &resp), (*xdswire.DiscoveryRequest).GetVersionInfo)
			}
		}
		if e.types[TypeListener].acks != 1 {
			t.Fatal("seed state not committed")
		}
		before := e.state
		lastGood := before.Versions[typeURL]
		accepted = nil
		a := handle()
		known := e.types[typeURL] != nil
		switch {
		case !known || nonce == "" || nonce == "seed":
			if a.n != 0 || e.state != before {
				t.Fatalf("ignored response answered (%d requests) or changed state", a.n)
			}
		case a.n == 0:
			t.Fatal("response neither ACKed nor NACKed")
		case a.typeURL != typeURL || a.nonce != nonce:
			t.Fatalf("first request for %s/%s, want %s/%s", a.typeURL, a.nonce, typeURL, nonce)
		case a.nack:
			if e.state != before {
				t.Fatal("NACK changed the committed state")
			}
			if !delta && a.version != lastGood {
				t.Fatalf("NACK version_info %q, want last good %q", a.version, lastGood)
			}
		default:
			if e.state != accepted {
				t.Fatal("ACK committed something other than what Apply accepted")
			}
		}
	})
}
