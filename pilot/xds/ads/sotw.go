package ads

import (
	"fmt"

	discoveryv3 "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	"google.golang.org/grpc/codes"
	grpcstatus "google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/anypb"

	"github.com/weft-mesh/weft/pilot/status"
	"github.com/weft-mesh/weft/pilot/xds/ads/acktrack"
	"github.com/weft-mesh/weft/pilot/xds/snapshot"
)

// sotwType is one type's state on a SotW stream.
type sotwType struct {
	ack     acktrack.State
	sent    *snapshot.Snapshot // snapshot the latest response was built from
	version string             // version_info of the latest response ("" = none sent)
	sentSel selection          // what the latest response selected
	force   bool               // answer at the next push even if unchanged (new subscription)
}

type sotwStream struct {
	*stream
	types map[string]*sotwType
}

// fullSet reports whether every response of typ carries the whole subscribed
// set, so that absence means deletion (LDS and CDS).
// A LEDS node's LbEndpoints are too: they are subscribed by wildcard.
func fullSet(typ string) bool {
	return typ == snapshot.ListenerType || typ == snapshot.ClusterType || typ == snapshot.LbEndpointType
}

// StreamAggregatedResources serves a state-of-the-world ADS stream.
func (s *Server) StreamAggregatedResources(gs discoveryv3.AggregatedDiscoveryService_StreamAggregatedResourcesServer) error {
	send := func(m proto.Message) error { return gs.Send(m.(*discoveryv3.DiscoveryResponse)) }
	return serve(s, gs.Context(), "sotw", gs.Recv, send, func(base *stream) owner[*discoveryv3.DiscoveryRequest] {
		return &sotwStream{stream: base, types: map[string]*sotwType{}}
	})
}

func (st *sotwStream) handle(req *discoveryv3.DiscoveryRequest) error {
	now := st.s.cfg.Clock()
	typ, ok, err := st.admit(req, now)
	if !ok {
		return err
	}
	// Counted before anything is built from the names: a request past the
	// bound costs only its decoding.
	if n, lim := len(req.GetResourceNames()), st.maxSubscriptions(); n > lim {
		return grpcstatus.Errorf(codes.ResourceExhausted, "ads: node %s: %s requests %d resource names, limit %d over all types%s", st.nodeID, status.TypeName(typ), n, lim, st.readOnlyNote())
	}
	if err := st.checkNames(typ, req.GetResourceNames()); err != nil {
		return err
	}
	t, ok := st.types[typ]
	if !ok {
		t = &sotwType{}
		st.types[typ] = t
	}
	r := acktrack.ClassifySotW(t.ack, req, now)
	if r.Answer != acktrack.NoAnswer {
		st.answered(typ, r.Nonce)
	}
	switch r.Answer {
	case acktrack.AckAnswer:
		st.conn.Acked(typ, r.Nonce, now)
	case acktrack.NackAnswer:
		st.log.Warn("NACK", "type", typ, "version", t.version, "nonce", r.Nonce, "error", r.ErrorDetail.GetMessage())
		st.conn.Nacked(typ, r.Nonce, r.ErrorDetail.GetMessage(), now)
	}
	if r.Kind == acktrack.Stale {
		return nil
	}
	if err := st.subscribed(typ, len(r.State.Subscribed)); err != nil {
		return err
	}
	t.ack = r.State
	if r.Kind == acktrack.Initial {
		st.conn.Subscribed(typ, now)
	}
	if len(r.Removed) > 0 && t.sent != nil {
		// The client dropped names: it now holds the rest of the last response.
		t.sentSel = selectFor(t.sent, typ, t.ack)
		t.version = t.sentSel.version
	}
	// A new or grown subscription is answered even if nothing changed. It goes
	// through pushAll so that, if the snapshot moved on meanwhile, the other
	// types are brought along first in push order. Anything else waits for the
	// next snapshot.
	if r.Kind == acktrack.Initial || len(r.Added) > 0 {
		t.force = true
		return st.pushAll()
	}
	return nil
}

// pushAll sends whatever changed in the latest snapshot in make-before-break
// order: CDS, EDS, LDS, RDS; clusters being removed go last. When a CDS update both
// adds and removes clusters, a first CDS response carries the union (new set plus
// the clusters still referenced by the old routes) and the final set follows RDS.
func (st *sotwStream) pushAll() error {
	latest := st.watch.Snapshot()
	if latest == nil {
		return nil
	}
	deferCDS := false
	if t, ok := st.types[snapshot.ClusterType]; ok && t.sent != nil {
		if union, removing := st.cdsUnion(t, latest); removing {
			deferCDS = true
			if union.version != t.version {
				if err := st.sendSel(snapshot.ClusterType, t, latest, union, func(n string) snapshot.Resource {
					if r, ok := latest.Resources[snapshot.ClusterType][n]; ok {
						return r
					}
					return t.sent.Resources[snapshot.ClusterType][n]
				}); err != nil {
					return err
				}
			}
		}
	}
	for _, typ := range snapshot.PushOrder {
		if typ == snapshot.ClusterType && deferCDS {
			continue
		}
		if err := st.push(typ, latest); err != nil {
			return err
		}
	}
	if deferCDS {
		return st.push(snapshot.ClusterType, latest)
	}
	return nil
}

// cdsUnion returns the selection of latest's clusters plus the ones the last
// response had that latest drops, and whether any are dropped.
func (st *sotwStream) cdsUnion(t *sotwType, latest *snapshot.Snapshot) (selection, bool) {
	typ := snapshot.ClusterType
	cur := latest.Resources[typ]
	var removed []string
	for _, n := range t.sentSel.all(t.sent, typ) {
		if _, ok := cur[n]; !ok {
			removed = append(removed, n)
		}
	}
	if len(removed) == 0 {
		return selection{}, false
	}
	sel := selectFor(latest, typ, t.ack)
	names := append(append([]string(nil), sel.all(latest, typ)...), removed...)
	sortStrings(names)
	rs := make(map[string]snapshot.Resource, len(names))
	for _, n := range names {
		if r, ok := cur[n]; ok {
			rs[n] = r
		} else {
			rs[n] = t.sent.Resources[typ][n]
		}
	}
	only := map[string]struct{}{}
	for _, n := range names {
		only[n] = struct{}{}
	}
	return selection{names: names, only: only, version: namesVersion(rs, names)}, true
}

// push sends typ from latest if the subscription's content changed since the last
// response (or a new subscription forces an answer). A rejected version is never
// resent: only content that differs from the last response goes out.
func (st *sotwStream) push(typ string, latest *snapshot.Snapshot) error {
	t, ok := st.types[typ]
	if !ok || !t.ack.Started {
		return nil
	}
	force := t.force
	t.force = false
	sel := selectFor(latest, typ, t.ack)
	empty := len(sel.all(latest, typ)) == 0
	unchanged := !force && sel.version == t.version
	if !unchanged && !force && !fullSet(typ) && t.sent != nil {
		// RDS and EDS have no deletion in SotW: a response that only drops
		// names tells the client nothing, so send only what is new or changed.
		unchanged = !anyNew(t, latest, typ, sel)
	}
	// For the same reason an empty RDS or EDS response is never sent; LDS and
	// CDS always answer (empty = delete all).
	if unchanged || (empty && !fullSet(typ)) {
		t.sent, t.sentSel = latest, sel
		if empty && !fullSet(typ) {
			t.version = sel.version
		}
		st.conn.Unchanged(typ, latest.Revision, latest, sel.only, st.s.cfg.Clock())
		return nil
	}
	return st.sendSel(typ, t, latest, sel, func(n string) snapshot.Resource { return latest.Resources[typ][n] })
}

// anyNew reports whether sel selects a resource the client was not sent, or was
// sent at another version.
func anyNew(t *sotwType, latest *snapshot.Snapshot, typ string, sel selection) bool {
	prev, cur := t.sent.Resources[typ], latest.Resources[typ]
	for _, n := range sel.all(latest, typ) {
		p, ok := prev[n]
		if _, was := t.sentSel.only[n]; !ok || (t.sentSel.only != nil && !was) || p.Version != cur[n].Version {
			return true
		}
	}
	return false
}

func (st *sotwStream) sendSel(typ string, t *sotwType, from *snapshot.Snapshot, sel selection, get func(string) snapshot.Resource) error {
	names := sel.all(from, typ)
	anys := make([]*anypb.Any, 0, len(names))
	for _, n := range names {
		a := get(n).Any
		if typ == snapshot.LbEndpointType {
			// Its body has no name: SotW carries it in a discovery Resource
			// that names it (xDS "resources in SotW"). Wrapped per send: a
			// Weft sidecar on delta, the path that matters, gets no wrapper.
			w, err := wrapResource(n, get(n))
			if err != nil {
				return err
			}
			a = w
		}
		anys = append(anys, a)
	}
	nonce, err := st.nextNonce(typ)
	if err != nil {
		return err
	}
	resp := &discoveryv3.DiscoveryResponse{VersionInfo: sel.version, Resources: anys, TypeUrl: typ, Nonce: nonce}
	// Recorded before the send: once the proxy can hold this response, the status
	// must already say it is pending, or a reader could see the previous ACK as
	// current for a response already delivered. A failed send ends the stream,
	// which marks the proxy disconnected.
	size := proto.Size(resp)
	st.conn.Sent(status.Sent{Type: typ, Version: sel.version, Nonce: nonce, Revision: from.Revision, Bytes: size,
		Snapshot: from, Only: sel.only}, st.s.cfg.Clock())
	if err := st.sendMsg(typ, resp, size); err != nil {
		return err
	}
	t.ack = t.ack.Sent(nonce)
	t.sent, t.sentSel, t.version = from, sel, sel.version
	if st.log.IsTrace() {
		st.log.Trace("sent", "type", typ, "version", sel.version, "nonce", nonce, "resources", len(anys))
	}
	return nil
}

// wrapResource is r in a discovery Resource named name, as an Any.
func wrapResource(name string, r snapshot.Resource) (*anypb.Any, error) {
	a, err := anypb.New(&discoveryv3.Resource{Name: name, Version: r.Version, Resource: r.Any})
	if err != nil {
		return nil, fmt.Errorf("ads: wrap %s %q: %w", status.TypeName(snapshot.LbEndpointType), name, err)
	}
	return a, nil
}
