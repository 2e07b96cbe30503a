package ads

import (
	"sort"

	discoveryv3 "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	"google.golang.org/grpc/codes"
	grpcstatus "google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	"github.com/weft-mesh/weft/pilot/status"
	"github.com/weft-mesh/weft/pilot/xds/ads/acktrack"
	"github.com/weft-mesh/weft/pilot/xds/adscodec"
	"github.com/weft-mesh/weft/pilot/xds/snapshot"
)

// deltaType is one type's state on a delta stream. What the client holds is
// described compactly: after every push it holds synced's resources for the names
// it subscribes to, so the next push only looks at the names that differ between
// synced and the latest snapshot (a shared, cached diff).
type deltaType struct {
	ack     acktrack.State
	synced  *snapshot.Snapshot  // the client holds this snapshot's subscribed resources; nil before the first push
	initial bool                // the first push is still to come
	known   map[string]string   // initial_resource_versions, used by the first push only
	force   map[string]struct{} // names to answer at the next push even if unchanged
	wild    bool                // the wildcard was just added: answer every resource
}

type deltaStream struct {
	*stream
	types [numTypes]*deltaType // by typeIndex; nil until the type is first requested
}

// DeltaAggregatedResources serves an incremental ADS stream.
func (s *Server) DeltaAggregatedResources(gs discoveryv3.AggregatedDiscoveryService_DeltaAggregatedResourcesServer) error {
	send := func(m proto.Message) error { return gs.Send(m.(*discoveryv3.DeltaDiscoveryResponse)) }
	return serve(s, gs.Context(), "delta", gs.Recv, send, func(base *stream) owner[*discoveryv3.DeltaDiscoveryRequest] {
		return &deltaStream{stream: base}
	})
}

func (st *deltaStream) handle(req *discoveryv3.DeltaDiscoveryRequest) error {
	now := st.s.cfg.Clock()
	typ, ok, err := st.admit(req, now)
	if !ok {
		return err
	}
	// Counted before anything is built from the names: a request past the
	// bound costs only its decoding.
	lim := st.maxSubscriptions()
	if n := len(req.GetResourceNamesSubscribe()); n > lim {
		return grpcstatus.Errorf(codes.ResourceExhausted, "ads: node %s: %s subscribes to %d resource names, limit %d over all types%s", st.nodeID, status.TypeName(typ), n, lim, st.readOnlyNote())
	}
	if n := len(req.GetInitialResourceVersions()); n > lim {
		return grpcstatus.Errorf(codes.ResourceExhausted, "ads: node %s: %s sends %d initial_resource_versions, limit %d", st.nodeID, status.TypeName(typ), n, lim)
	}
	if err := st.checkNames(typ, req.GetResourceNamesSubscribe()); err != nil {
		return err
	}
	for n := range req.GetInitialResourceVersions() {
		if err := st.checkNames(typ, []string{n}); err != nil {
			return err
		}
	}
	ti := typeIndex(typ) // admit let only served types through
	t := st.types[ti]
	if t == nil {
		t = &deltaType{initial: true}
		st.types[ti] = t
	}
	r := acktrack.ClassifyDelta(t.ack, req, now)
	if err := st.subscribed(typ, len(r.State.Subscribed)); err != nil {
		return err
	}
	if r.Answer != acktrack.NoAnswer {
		st.answered(typ, r.Nonce)
	}
	switch r.Answer {
	case acktrack.AckAnswer:
		st.conn.Acked(typ, r.Nonce, now)
	case acktrack.NackAnswer:
		st.log.Warn("NACK", "type", typ, "nonce", r.Nonce, "error", r.ErrorDetail.GetMessage())
		st.conn.Nacked(typ, r.Nonce, r.ErrorDetail.GetMessage(), now)
	}
	t.ack = r.State
	switch {
	case r.Kind == acktrack.Initial:
		st.conn.Subscribed(typ, now)
		t.known = r.Initial
		for n := range r.State.Subscribed {
			if _, has := t.known[n]; !has {
				t.addForce(n) // answer it, or say it does not exist
			}
		}
	default:
		for _, n := range r.Added {
			if n == acktrack.Wildcard {
				t.wild = true
			} else {
				t.addForce(n)
			}
		}
		if r.State.Wildcard {
			// An explicit name dropped while the wildcard still covers it must
			// be answered (xDS protocol, "Unsubscribing from Resources").
			for _, n := range r.Removed {
				if n != acktrack.Wildcard {
					t.addForce(n)
				}
			}
		}
	}
	if !t.initial && len(t.force) == 0 && !t.wild {
		return nil
	}
	// Answer through pushAll so that, if the snapshot moved on meanwhile, the
	// other types are brought along first in push order.
	return st.pushAll()
}

func (t *deltaType) addForce(n string) {
	if t.force == nil {
		t.force = map[string]struct{}{}
	}
	t.force[n] = struct{}{}
}

// pushAll sends what changed for every subscribed type: additions and updates
// first in CDS, EDS, LDS, RDS order, then removals in the reverse order, so a
// proxy never holds a reference to something it does not have. LEDS's
// removals are not references' targets and go with its additions.
//
// The whole push is built first and recorded in the stream's status at once
// (the types it leaves unchanged, and every response as pending before any is
// sent), then sent.
func (st *deltaStream) pushAll() error {
	latest := st.watch.Snapshot()
	if latest == nil {
		return nil
	}
	var adds, rms [numTypes]*discoveryv3.DeltaDiscoveryResponse
	var heldBuf [numTypes]status.Held
	held := heldBuf[:0]
	for i, typ := range snapshot.PushOrder {
		t := st.types[i]
		if t == nil {
			continue
		}
		add, rm, unchanged := st.build(typ, t, latest)
		if unchanged {
			held = append(held, status.Held{Type: typ, Only: selectFor(latest, typ, t.ack).only})
			continue
		}
		if typ == snapshot.LbEndpointType && rm != nil {
			// Nothing names one LbEndpoint (an assignment names its
			// collection), so its removals need not wait for the other
			// types: they go with its additions, one response per change.
			if add == nil {
				add = rm
			} else {
				add.RemovedResources = rm.RemovedResources
			}
			rm = nil
		}
		adds[i], rms[i] = add, rm
	}
	// In send order: the additions in push order, then the removals reversed.
	var order [2 * numTypes]outgoing
	n := 0
	for i, r := range adds {
		if r != nil {
			order[n] = outgoing{ti: i, resp: r}
			n++
		}
	}
	for i := len(rms) - 1; i >= 0; i-- {
		if rms[i] != nil {
			order[n] = outgoing{ti: i, resp: rms[i]}
			n++
		}
	}
	var sentBuf [2 * numTypes]status.Sent
	sent := sentBuf[:0]
	for k := range order[:n] {
		o := &order[k]
		typ := snapshot.PushOrder[o.ti]
		nonce, err := st.nextNonce(typ)
		if err != nil {
			return err
		}
		sel := selectFor(latest, typ, st.types[o.ti].ack)
		o.resp.Nonce, o.resp.SystemVersionInfo = nonce, sel.version
		o.size = adscodec.DeltaSize(o.resp) // proto.Size, without its reflection for what pilot sends
		sent = append(sent, status.Sent{Type: typ, Version: sel.version, Nonce: nonce, Revision: latest.Revision, Bytes: o.size,
			Snapshot: latest, Only: sel.only})
	}
	// Recorded before the sends: once the proxy can hold a response, the
	// status must already say it is pending, or a reader could see the
	// previous ACK as current for a response already delivered. A failed
	// send ends the stream, which marks the proxy disconnected.
	if len(held) > 0 || len(sent) > 0 {
		st.conn.Pushed(latest.Revision, latest, held, sent, st.s.cfg.Clock())
	}
	for _, o := range order[:n] {
		typ := snapshot.PushOrder[o.ti]
		if err := st.sendMsg(typ, o.resp, o.size); err != nil {
			return err
		}
		t := st.types[o.ti]
		t.ack = t.ack.Sent(o.resp.Nonce)
		if st.log.IsTrace() {
			st.log.Trace("sent", "type", typ, "version", o.resp.SystemVersionInfo, "nonce", o.resp.Nonce, "resources", len(o.resp.Resources), "removed", len(o.resp.RemovedResources))
		}
	}
	return nil
}

// outgoing is one response of a push, by typeIndex, with its size.
type outgoing struct {
	ti   int
	resp *discoveryv3.DeltaDiscoveryResponse
	size int
}

// build computes the responses that bring the client from what it holds to
// latest: one with resources to add or update, one with names to remove (either
// may be nil). It records that the client will hold latest; unchanged says
// nothing is to be sent, which the caller reports as the type unchanged at
// latest's revision (not when latest is what the type was already synced to).
func (st *deltaStream) build(typ string, t *deltaType, latest *snapshot.Snapshot) (add, rm *discoveryv3.DeltaDiscoveryResponse, unchanged bool) {
	if !t.initial && t.synced == latest && len(t.force) == 0 && !t.wild {
		return nil, nil, false
	}
	cur := latest.Resources[typ]
	// candidates: the names whose state may differ, as one sorted list; the
	// common cases (a wildcard's first push, a plain update) reuse shared,
	// already sorted slices instead of building a set per stream.
	var candidates []string
	var have func(string) (string, bool)
	switch {
	case t.initial || t.synced == nil:
		var all []string
		if t.ack.Wildcard {
			all = st.s.wraps.get(latest, typ).names
		}
		candidates = mergeSorted(all, sortedKeys(t.ack.Subscribed), sortedKeys(t.force), sortedKeys(t.known))
		have = func(n string) (string, bool) { v, ok := t.known[n]; return v, ok }
	default:
		var all []string
		if t.wild {
			all = st.s.wraps.get(latest, typ).names
		}
		if t.ack.Wildcard && len(t.force) == 0 && !t.wild {
			break // shared below
		}
		candidates = mergeSorted(st.s.diffs.names(t.synced, latest, typ), sortedKeys(t.force), all)
		prev := t.synced.Resources[typ]
		have = func(n string) (string, bool) { r, ok := prev[n]; return r.Version, ok }
	}
	var resources []*discoveryv3.Resource
	var removed []string
	if !t.initial && t.synced != nil && t.ack.Wildcard && len(t.force) == 0 && !t.wild {
		// A plain update of a wildcard subscription (every stream of a
		// fleet-wide change): what it is sent depends only on the two sets,
		// so it is computed once and shared.
		resources, removed = st.s.diffs.wildcard(t.synced, latest, typ, st.s.wraps)
	}
	var wraps *wrapped // fetched on first use: most pushes send nothing for most types
	for _, n := range candidates {
		if !t.ack.IsSubscribed(n) {
			continue
		}
		_, forced := t.force[n]
		hv, has := have(n)
		if r, ok := cur[n]; ok {
			if forced || t.wild || !has || hv != r.Version {
				if wraps == nil {
					wraps = st.s.wraps.get(latest, typ)
				}
				resources = append(resources, wraps.byName[n])
			}
		} else if has || forced {
			removed = append(removed, n)
		}
	}
	if wraps != nil && len(resources) == len(wraps.all) {
		// Everything, in the same (name) order: share the one slice.
		resources = wraps.all
	}
	// The first answer to a wildcard subscription is sent even when empty, so
	// the client knows the set is complete.
	emptyInitial := t.initial && t.ack.Wildcard && len(resources) == 0 && len(removed) == 0
	t.synced, t.initial, t.known, t.force, t.wild = latest, false, nil, nil, false
	if len(resources) > 0 || emptyInitial {
		add = &discoveryv3.DeltaDiscoveryResponse{TypeUrl: typ, Resources: resources}
	}
	if len(removed) > 0 {
		rm = &discoveryv3.DeltaDiscoveryResponse{TypeUrl: typ, RemovedResources: removed}
	}
	return add, rm, add == nil && rm == nil
}

func sortedKeys[V any](m map[string]V) []string {
	if len(m) == 0 {
		return nil
	}
	out := make([]string, 0, len(m))
	for n := range m {
		out = append(out, n)
	}
	sort.Strings(out)
	return out
}

// mergeSorted merges sorted lists into one sorted list without duplicates. With
// a single non-empty list it returns that list itself: callers only read it.
func mergeSorted(lists ...[]string) []string {
	var nonEmpty [][]string
	total := 0
	for _, l := range lists {
		if len(l) > 0 {
			nonEmpty = append(nonEmpty, l)
			total += len(l)
		}
	}
	switch len(nonEmpty) {
	case 0:
		return nil
	case 1:
		return nonEmpty[0]
	}
	out := make([]string, 0, total)
	idx := make([]int, len(nonEmpty))
	for {
		best := -1
		for i, l := range nonEmpty {
			if idx[i] < len(l) && (best < 0 || l[idx[i]] < nonEmpty[best][idx[best]]) {
				best = i
			}
		}
		if best < 0 {
			return out
		}
		n := nonEmpty[best][idx[best]]
		if len(out) == 0 || out[len(out)-1] != n {
			out = append(out, n)
		}
		idx[best]++
	}
}
