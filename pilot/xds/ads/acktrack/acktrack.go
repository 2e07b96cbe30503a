// Package acktrack classifies xDS requests on one ADS stream, one resource type at a
// time: initial request, ACK, NACK, stale nonce, subscription growth or shrinkage.
// It is pure: Classify reads its arguments and returns a new State, so the protocol
// rules are table-tested line by line and the stream owner only acts on the result.
package acktrack

import (
	"sort"
	"time"

	discoveryv3 "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	rpcstatus "google.golang.org/genproto/googleapis/rpc/status"
)

// Wildcard is the explicit wildcard resource name.
const Wildcard = "*"

// Type URLs used in tests and seeds.
const (
	listenerType = "type.googleapis.com/envoy.config.listener.v3.Listener"
	clusterType  = "type.googleapis.com/envoy.config.cluster.v3.Cluster"
)

// Kind is what one request means for its type.
type Kind int

// Kinds, in the precedence Classify applies when a request means several things
// (a NACK that also changes the subscription is reported as NACK; Added/Removed
// still carry the change).
const (
	Initial     Kind = iota + 1 // first request for this type on the stream
	NACK                        // answers the latest response and rejects it (error_detail set)
	Resubscribe                 // subscription grew: send the new names even if unchanged
	Unsubscribe                 // subscription only shrank: nothing to send
	ACK                         // answers the latest response and accepts it
	Stale                       // answers an older response: ignore the answer
	Unchanged                   // neither answers the latest response nor changes the subscription
)

func (k Kind) String() string {
	switch k {
	case Initial:
		return "initial"
	case NACK:
		return "nack"
	case Resubscribe:
		return "resubscribe"
	case Unsubscribe:
		return "unsubscribe"
	case ACK:
		return "ack"
	case Stale:
		return "stale"
	case Unchanged:
		return "unchanged"
	}
	return "unknown"
}

// Answer is how a request relates to the latest response sent for its type.
type Answer int

const (
	NoAnswer    Answer = iota // no nonce, or nothing sent yet
	AckAnswer                 // response_nonce == latest nonce, no error_detail
	NackAnswer                // response_nonce == latest nonce, error_detail set
	StaleAnswer               // response_nonce names an older (or unknown) response
)

// State is one type's protocol state on one stream. Treat it as a value: Classify
// never mutates the Subscribed map it receives, it copies on change.
type State struct {
	Started    bool                // a request for this type was seen on this stream
	Nonce      string              // latest nonce sent for this type ("" = none yet)
	Wildcard   bool                // subscribed to every resource of the type
	Explicit   bool                // SotW: the client has named a resource at least once
	Subscribed map[string]struct{} // explicitly subscribed names (never contains "*")
}

// Sent returns the state after a response with nonce was sent.
func (s State) Sent(nonce string) State {
	s.Nonce = nonce
	return s
}

// IsSubscribed reports whether name is covered by the subscription.
func (s State) IsSubscribed(name string) bool {
	if s.Wildcard {
		return true
	}
	_, ok := s.Subscribed[name]
	return ok
}

// Result is the classification of one request.
type Result struct {
	Kind        Kind
	Answer      Answer
	Nonce       string            // response_nonce of the request
	Version     string            // SotW version_info (the client's last accepted version)
	ErrorDetail *rpcstatus.Status // set on NACK
	Added       []string          // names newly subscribed, sorted ("*" when wildcard was added)
	Removed     []string          // names unsubscribed, sorted ("*" when wildcard was dropped)
	At          time.Time         // when the request was classified (now)
	State       State             // the state after the request
	Initial     map[string]string // delta: initial_resource_versions of an initial request
}

// ClassifySotW classifies a state-of-the-world DiscoveryRequest. A stale nonce makes
// the whole request ignored (the client sends its current names again once it sees
// the newer response), so State is returned unchanged.
func ClassifySotW(st State, req *discoveryv3.DiscoveryRequest, now time.Time) Result {
	r := Result{Nonce: req.GetResponseNonce(), Version: req.GetVersionInfo(), At: now}
	if st.Started && r.Nonce != "" && r.Nonce != st.Nonce {
		r.Kind, r.Answer, r.State = Stale, StaleAnswer, st
		return r
	}
	next := st
	next.Started = true
	names := req.GetResourceNames()
	wildcard, explicit := false, map[string]struct{}{}
	for _, n := range names {
		if n == Wildcard {
			wildcard = true
			continue
		}
		explicit[n] = struct{}{}
	}
	next.Explicit = st.Explicit || len(explicit) > 0
	// The legacy wildcard: a client that has never named a resource of this type
	// wants all of them. The protocol defines it for LDS and CDS; it is accepted
	// for every type, as go-control-plane does, because Envoy and gRPC always
	// name RDS and EDS resources from their first request (so they never hit
	// it) while simple clients and debugging tools rely on it.
	if !wildcard && !next.Explicit && len(names) == 0 {
		wildcard = true
	}
	next.Wildcard = wildcard
	r.Added, r.Removed = diffSets(st, wildcard, explicit)
	next.Subscribed = explicit
	if len(r.Added) == 0 && len(r.Removed) == 0 {
		next.Subscribed = st.Subscribed // keep sharing the old map
	}
	return finish(st, next, r, req.GetErrorDetail())
}

// ClassifyDelta classifies a DeltaDiscoveryRequest. Subscription changes apply even
// when the nonce is stale (nonces only correlate answers in delta).
func ClassifyDelta(st State, req *discoveryv3.DeltaDiscoveryRequest, now time.Time) Result {
	r := Result{Nonce: req.GetResponseNonce(), At: now}
	next := st
	next.Started = true
	sub, unsub := req.GetResourceNamesSubscribe(), req.GetResourceNamesUnsubscribe()
	wildcard := st.Wildcard
	if !st.Started && len(sub) == 0 && len(unsub) == 0 {
		wildcard = true // legacy wildcard: first request names nothing
	}
	explicit := st.Subscribed
	copied := false
	cp := func() {
		if !copied {
			m := make(map[string]struct{}, len(explicit)+len(sub))
			for k := range explicit {
				m[k] = struct{}{}
			}
			explicit, copied = m, true
		}
	}
	for _, n := range sub {
		if n == Wildcard {
			wildcard = true
			continue
		}
		if _, ok := explicit[n]; !ok {
			cp()
			explicit[n] = struct{}{}
		}
	}
	for _, n := range unsub {
		if n == Wildcard {
			wildcard = false
			continue
		}
		if _, ok := explicit[n]; ok {
			cp()
			delete(explicit, n)
		}
	}
	next.Wildcard = wildcard
	r.Added, r.Removed = diffSets(st, wildcard, explicit)
	// An explicit name unsubscribed while the wildcard still covers it lands in
	// Removed with State.Wildcard true; the owner must answer it (xDS protocol,
	// "Unsubscribing from Resources").
	next.Subscribed = explicit
	if !st.Started {
		r.Initial = req.GetInitialResourceVersions()
	}
	return finish(st, next, r, req.GetErrorDetail())
}

// finish fills in the answer and the kind once the subscription change is known.
func finish(st, next State, r Result, detail *rpcstatus.Status) Result {
	r.State = next
	r.Answer = answer(st, r.Nonce, detail)
	if r.Answer == NackAnswer {
		r.ErrorDetail = detail
	}
	r.Kind = kindOf(st, r)
	return r
}

func answer(st State, nonce string, detail *rpcstatus.Status) Answer {
	switch {
	case nonce == "" || !st.Started:
		if nonce != "" {
			return StaleAnswer // a nonce from another stream: nonces do not survive reconnects
		}
		return NoAnswer
	case nonce != st.Nonce:
		return StaleAnswer
	case detail != nil:
		return NackAnswer
	}
	return AckAnswer
}

func kindOf(st State, r Result) Kind {
	switch {
	case !st.Started:
		return Initial
	case r.Answer == NackAnswer:
		return NACK
	case len(r.Added) > 0:
		return Resubscribe
	case len(r.Removed) > 0:
		return Unsubscribe
	case r.Answer == AckAnswer:
		return ACK
	case r.Answer == StaleAnswer:
		return Stale
	}
	return Unchanged
}

// diffSets compares the old subscription with the new one.
func diffSets(st State, wildcard bool, explicit map[string]struct{}) (added, removed []string) {
	if wildcard && !st.Wildcard {
		added = append(added, Wildcard)
	}
	if !wildcard && st.Wildcard {
		removed = append(removed, Wildcard)
	}
	for n := range explicit {
		if _, ok := st.Subscribed[n]; !ok {
			added = append(added, n)
		}
	}
	for n := range st.Subscribed {
		if _, ok := explicit[n]; !ok {
			removed = append(removed, n)
		}
	}
	sort.Strings(added)
	sort.Strings(removed)
	return added, removed
}
