package xdsclient

import (
	"context"
	"crypto/sha256"
	"encoding/binary"
	"errors"
	"fmt"
	"maps"
	"slices"
	"time"

	"github.com/hashicorp/go-hclog"
	statuspb "google.golang.org/genproto/googleapis/rpc/status"
	"google.golang.org/grpc/codes"
	"google.golang.org/protobuf/proto"

	"github.com/weft-mesh/weft/bootstrap/node"
	"github.com/weft-mesh/weft/sidecar/xdswire"
)

// resourceWrapperType is a discovery Resource carried in a SotW response's
// Any: it names a resource whose body has no name.
const resourceWrapperType = "type.googleapis.com/envoy.service.discovery.v3.Resource"

// wildcard is the explicit wildcard name (delta). SotW uses the legacy form (no
// names), because go-control-plane's SotW snapshot cache filters by literal name.
const wildcard = "*"

// typeState is the per-type protocol state. Owned by the engine's goroutine.
type typeState struct {
	url   string
	named bool
	// per stream
	nonce      string   // latest nonce received on this stream
	sent       bool     // a request for this type went out on this stream
	subscribed []string // names last sent (named types only)
	// counters, kept across streams
	acks, nacks, ignored uint64
	lastErr              string
	lastUpdate           time.Time
	// rejected remembers the last NACKed SotW response (version and content digest)
	// against the same committed state, so an identical resend is NACKed again
	// without decoding and applying it.
	rejected      [sha256.Size]byte
	rejectedErr   error
	rejectedState *Update
}

// engine is the transport-free protocol core: it turns responses into requests and
// calls Decode/Apply. One goroutine owns it (the stream loop); it is not safe for
// concurrent use. Its observable state is published as immutable TypeStatus values.
type engine struct {
	cfg      Config
	log      hclog.Logger
	named    map[string]bool
	types    map[string]*typeState
	order    []*typeState
	state    *Update             // committed
	refs     map[string][]string // names the committed state references, per named type
	sendNode bool                // the next request is the first of its stream
	unknown  uint64              // responses for a type we did not subscribe to
	lastAck  time.Time
}

func newEngine(cfg Config) *engine {
	e := &engine{cfg: cfg, log: cfg.Logger, named: map[string]bool{}, types: map[string]*typeState{}}
	for _, t := range cfg.NamedTypes {
		e.named[t] = true
	}
	for _, t := range cfg.Types {
		ts := &typeState{url: t, named: e.named[t]}
		e.types[t] = ts
		e.order = append(e.order, ts)
	}
	e.state = emptyUpdate()
	if cfg.Initial != nil {
		u := cfg.Initial.clone()
		u.Changed = ""
		e.state = u
	}
	e.refs = settle(e.state, e.named)
	return e
}

// startStream forgets per-stream protocol state (nonces do not survive a stream).
func (e *engine) startStream() {
	e.sendNode = true
	for _, t := range e.order {
		t.nonce, t.sent, t.subscribed = "", false, nil
	}
}

func (e *engine) nodeOnce() *xdswire.Node {
	if !e.sendNode {
		return nil
	}
	e.sendNode = false
	return wireNode(e.cfg.Node)
}

// initialSotW is the first request per type on a new SotW stream. Named types with
// nothing to ask for wait: an empty name list would mean wildcard.
func (e *engine) initialSotW() []*xdswire.DiscoveryRequest {
	var out []*xdswire.DiscoveryRequest
	for _, t := range e.order {
		names := e.refs[t.url]
		if t.named && len(names) == 0 {
			continue
		}
		out = append(out, e.sotwRequest(t))
	}
	return out
}

func (e *engine) sotwRequest(t *typeState) *xdswire.DiscoveryRequest {
	req := &xdswire.DiscoveryRequest{
		Node:          e.nodeOnce(),
		TypeUrl:       t.url,
		VersionInfo:   e.state.Versions[t.url],
		ResponseNonce: t.nonce,
	}
	if t.named {
		req.ResourceNames = slices.Clone(e.refs[t.url])
		t.subscribed = req.ResourceNames
	} else if t.url != TypeListener && t.url != TypeCluster {
		// Only LDS and CDS keep the legacy "no names = wildcard"; any other wildcard
		// type must name "*" (xDS protocol), or a strict server sends nothing.
		req.ResourceNames = []string{wildcard}
	}
	t.sent = true
	return req
}

// initialDelta subscribes every type and announces what the client holds.
func (e *engine) initialDelta() []*xdswire.DeltaDiscoveryRequest {
	var out []*xdswire.DeltaDiscoveryRequest
	for _, t := range e.order {
		held := e.state.Resources[t.url]
		names := []string{wildcard}
		if t.named {
			names = slices.Clone(e.refs[t.url])
			if len(names) == 0 {
				continue
			}
			t.subscribed = names
		}
		req := &xdswire.DeltaDiscoveryRequest{
			Node:                   e.nodeOnce(),
			TypeUrl:                t.url,
			ResourceNamesSubscribe: names,
		}
		if len(held) > 0 {
			req.InitialResourceVersions = make(map[string]string, len(held))
			for name, r := range held {
				req.InitialResourceVersions[name] = r.Version
			}
		}
		t.sent = true
		out = append(out, req)
	}
	return out
}

// accept filters responses the protocol says to ignore: unknown types (the client
// ignores what it did not subscribe to; NACKing would subscribe it), responses
// without a nonce (they cannot be ACKed), and a replay of the nonce just handled.
func (e *engine) accept(typeURL, nonce string) *typeState {
	t, ok := e.types[typeURL]
	if !ok {
		e.unknown++
		e.log.Warn("ignoring response for a type not subscribed", "type", typeURL, "nonce", nonce)
		return nil
	}
	if nonce == "" || nonce == t.nonce {
		t.ignored++
		e.log.Warn("ignoring response with an empty or repeated nonce", "type", typeURL, "nonce", nonce)
		return nil
	}
	t.nonce = nonce
	return t
}

// commit builds the candidate with next as the new resources of typeURL, lets Apply
// judge it, and commits it on success.
func (e *engine) commit(ctx context.Context, t *typeState, next map[string]Resource, version string) error {
	cand := e.state.clone()
	cand.Resources[t.url] = next
	cand.Versions[t.url] = version
	cand.Changed = t.url
	refs := settle(cand, e.named)
	if err := e.cfg.Apply(ctx, cand); err != nil {
		return err
	}
	e.state, e.refs = cand, refs
	return nil
}

func (e *engine) record(t *typeState, err error) *statuspb.Status {
	now := e.cfg.Now()
	t.lastUpdate = now
	if err != nil {
		t.nacks++
		// A server that resends a rejected version (go-control-plane's SotW cache
		// does, in a loop) must not flood the log: warn once per distinct error.
		if msg := err.Error(); msg != t.lastErr {
			e.log.Warn("NACK", "type", t.url, "nonce", t.nonce, "error", err)
		} else {
			e.log.Debug("NACK (repeated)", "type", t.url, "nonce", t.nonce)
		}
		t.lastErr = err.Error()
		return &statuspb.Status{Code: int32(codes.InvalidArgument), Message: err.Error()}
	}
	t.acks++
	t.lastErr = ""
	e.lastAck = now
	e.log.Debug("ACK", "type", t.url, "nonce", t.nonce, "version", e.state.Versions[t.url])
	return nil
}

func (e *engine) checkCount(t *typeState, n int) error {
	if n > e.cfg.MaxResourcesPerResponse {
		return fmt.Errorf("type %s: response has %d resources, limit %d", ShortName(t.url), n, e.cfg.MaxResourcesPerResponse)
	}
	return nil
}

// handleSotW processes one SotW response and returns the requests to send: the
// ACK/NACK first, then subscription changes it caused for other types.
func (e *engine) handleSotW(ctx context.Context, resp *xdswire.DiscoveryResponse) []*xdswire.DiscoveryRequest {
	t := e.accept(resp.GetTypeUrl(), resp.GetNonce())
	if t == nil {
		return nil
	}
	digest := sotwDigest(resp)
	var err error
	if t.rejectedErr != nil && digest == t.rejected && t.rejectedState == e.state {
		err = t.rejectedErr
	} else {
		var next map[string]Resource
		next, err = e.decodeSotW(t, resp)
		if err == nil {
			err = e.commit(ctx, t, next, resp.GetVersionInfo())
		}
	}
	t.rejected, t.rejectedErr, t.rejectedState = digest, err, e.state
	nack := e.record(t, err)
	req := e.sotwRequest(t)
	req.ErrorDetail = nack
	out := []*xdswire.DiscoveryRequest{req}
	for _, o := range e.order {
		if o != t && o.named && !slices.Equal(o.subscribed, e.refs[o.url]) && (o.sent || len(e.refs[o.url]) > 0) {
			out = append(out, e.sotwRequest(o))
		}
	}
	return out
}

// sotwDigest identifies a SotW response's content (not its nonce).
func sotwDigest(resp *xdswire.DiscoveryResponse) [sha256.Size]byte {
	h := sha256.New()
	var n [8]byte
	field := func(b []byte) {
		binary.BigEndian.PutUint64(n[:], uint64(len(b)))
		h.Write(n[:])
		h.Write(b)
	}
	field([]byte(resp.GetVersionInfo()))
	for _, a := range resp.GetResources() {
		field([]byte(a.GetTypeUrl()))
		field(a.GetValue())
	}
	var out [sha256.Size]byte
	h.Sum(out[:0])
	return out
}

func (e *engine) decodeSotW(t *typeState, resp *xdswire.DiscoveryResponse) (map[string]Resource, error) {
	short := ShortName(t.url)
	if err := e.checkCount(t, len(resp.GetResources())); err != nil {
		return nil, err
	}
	var next map[string]Resource
	if t.named {
		// RDS/EDS in SotW carry only what changed: merge into what is held.
		next = maps.Clone(e.state.Resources[t.url])
	}
	if next == nil {
		next = make(map[string]Resource, len(resp.GetResources()))
	}
	seen := make(map[string]bool, len(resp.GetResources()))
	for i, a := range resp.GetResources() {
		label := fmt.Sprintf("#%d", i)
		if a == nil {
			return nil, fmt.Errorf("type %s: resource %s: empty", short, label)
		}
		// A resource whose body has no name (an LbEndpoint) comes wrapped
		// in a discovery Resource that names it (xDS: "resources in SotW").
		wrapped := ""
		if a.GetTypeUrl() == resourceWrapperType {
			var r xdswire.Resource
			if err := proto.Unmarshal(a.GetValue(), &r); err != nil {
				return nil, fmt.Errorf("type %s: resource %s: malformed Resource wrapper: %v", short, label, err)
			}
			if r.GetName() == "" {
				return nil, fmt.Errorf("type %s: resource %s: Resource wrapper without a name", short, label)
			}
			wrapped, label, a = r.GetName(), r.GetName(), r.GetResource()
		}
		if a.GetTypeUrl() != t.url {
			return nil, fmt.Errorf("type %s: resource %s: type_url %q does not match the response's", short, label, a.GetTypeUrl())
		}
		name, v, err := e.cfg.Decode(t.url, a)
		if name != "" {
			label = name
		}
		if err != nil {
			return nil, fmt.Errorf("type %s: resource %s: %w", short, label, err)
		}
		switch {
		case wrapped != "" && name == "":
			name = wrapped
		case wrapped != "" && name != wrapped:
			return nil, fmt.Errorf("type %s: resource %s: body is named %q", short, wrapped, name)
		}
		if name == "" {
			return nil, fmt.Errorf("type %s: resource %s: empty name", short, label)
		}
		if seen[name] {
			return nil, fmt.Errorf("type %s: resource %s: %w", short, name, errDuplicate)
		}
		seen[name] = true
		next[name] = Resource{Name: name, Version: resp.GetVersionInfo(), Value: v, Raw: a}
	}
	return next, nil
}

var errDuplicate = errors.New("duplicate name in one response")

// handleDelta processes one delta response.
func (e *engine) handleDelta(ctx context.Context, resp *xdswire.DeltaDiscoveryResponse) []*xdswire.DeltaDiscoveryRequest {
	t := e.accept(resp.GetTypeUrl(), resp.GetNonce())
	if t == nil {
		return nil
	}
	next, err := e.decodeDelta(t, resp)
	if err == nil {
		err = e.commit(ctx, t, next, resp.GetSystemVersionInfo())
	}
	out := []*xdswire.DeltaDiscoveryRequest{{
		Node:          e.nodeOnce(),
		TypeUrl:       t.url,
		ResponseNonce: resp.GetNonce(),
		ErrorDetail:   e.record(t, err),
	}}
	for _, o := range e.order {
		if !o.named {
			continue
		}
		want := e.refs[o.url]
		sub, unsub := diff(o.subscribed, want)
		if len(sub) == 0 && len(unsub) == 0 {
			continue
		}
		if !o.sent && len(sub) == 0 {
			continue
		}
		o.subscribed = slices.Clone(want)
		o.sent = true
		// A subscription change carries no nonce: it is not an ACK.
		out = append(out, &xdswire.DeltaDiscoveryRequest{TypeUrl: o.url, ResourceNamesSubscribe: sub, ResourceNamesUnsubscribe: unsub})
	}
	return out
}

func (e *engine) decodeDelta(t *typeState, resp *xdswire.DeltaDiscoveryResponse) (map[string]Resource, error) {
	short := ShortName(t.url)
	if err := e.checkCount(t, len(resp.GetResources())+len(resp.GetRemovedResources())); err != nil {
		return nil, err
	}
	next := maps.Clone(e.state.Resources[t.url])
	if next == nil {
		next = map[string]Resource{}
	}
	seen := make(map[string]bool, len(resp.GetResources()))
	for i, r := range resp.GetResources() {
		name := r.GetName()
		label := name
		if label == "" {
			return nil, fmt.Errorf("type %s: resource #%d: empty name", short, i)
		}
		if seen[name] {
			return nil, fmt.Errorf("type %s: resource %s: %w", short, name, errDuplicate)
		}
		seen[name] = true
		a := r.GetResource()
		if a == nil {
			return nil, fmt.Errorf("type %s: resource %s: no resource body", short, label)
		}
		if a.GetTypeUrl() != t.url {
			return nil, fmt.Errorf("type %s: resource %s: type_url %q does not match the response's", short, label, a.GetTypeUrl())
		}
		got, v, err := e.cfg.Decode(t.url, a)
		if err != nil {
			return nil, fmt.Errorf("type %s: resource %s: %w", short, label, err)
		}
		// A body without a name (an LbEndpoint: Decode returns "") is named
		// by its wrapper.
		if got != name && got != "" {
			return nil, fmt.Errorf("type %s: resource %s: body is named %q", short, label, got)
		}
		next[name] = Resource{Name: name, Version: r.GetVersion(), Value: v, Raw: a}
	}
	for _, name := range resp.GetRemovedResources() {
		if seen[name] {
			return nil, fmt.Errorf("type %s: resource %s: both updated and removed", short, name)
		}
		seen[name] = true
		delete(next, name)
	}
	return next, nil
}

// diff returns names in want but not have, and in have but not want; both sorted
// inputs.
func diff(have, want []string) (add, del []string) {
	for _, w := range want {
		if _, ok := slices.BinarySearch(have, w); !ok {
			add = append(add, w)
		}
	}
	for _, h := range have {
		if _, ok := slices.BinarySearch(want, h); !ok {
			del = append(del, h)
		}
	}
	return add, del
}

// statuses snapshots the per-type state for Status.
func (e *engine) statuses(connected bool) []TypeStatus {
	out := make([]TypeStatus, 0, len(e.order))
	for _, t := range e.order {
		ts := TypeStatus{
			TypeURL:    t.url,
			Version:    e.state.Versions[t.url],
			Nonce:      t.nonce,
			LastError:  t.lastErr,
			ACKs:       t.acks,
			NACKs:      t.nacks,
			Ignored:    t.ignored,
			Resources:  len(e.state.Resources[t.url]),
			Wildcard:   !t.named,
			Subscribed: slices.Clone(t.subscribed),
			Connected:  connected && t.sent,
			LastUpdate: t.lastUpdate,
		}
		out = append(out, ts)
	}
	return out
}

// wireNode renders the node in the trimmed core.Node (node.Wire's fields).
func wireNode(n *node.Node) *xdswire.Node {
	w := n.ToWire()
	p := &xdswire.Node{Id: w.ID, Cluster: w.Cluster, UserAgentName: w.UserAgentName, Metadata: w.Metadata, ClientFeatures: w.ClientFeatures}
	if l := w.Locality; l != nil {
		p.Locality = &xdswire.Locality{Region: l.Region, Zone: l.Zone, SubZone: l.SubZone}
	}
	return p
}
