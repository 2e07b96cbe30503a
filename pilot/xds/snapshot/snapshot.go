// Package snapshot holds one proxy's complete, consistent set of xDS resources at one
// store revision. A Snapshot is immutable once built by New: versions and hashes are
// computed there and never change.
package snapshot

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"sort"

	"github.com/weft-mesh/weft/bootstrap/leds"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/anypb"
)

// Type URLs Weft serves, in the order a push must follow so a proxy never sees a
// reference to something it does not have (CDS before EDS, LDS before RDS).
const (
	ClusterType  = "type.googleapis.com/envoy.config.cluster.v3.Cluster"
	EndpointType = "type.googleapis.com/envoy.config.endpoint.v3.ClusterLoadAssignment"
	// LbEndpointType is one endpoint of a ClusterLoadAssignment in LEDS form
	// (bootstrap/leds), for a Weft sidecar that advertises node.FeatureLEDS.
	// It follows EDS: the assignment names the collection first.
	LbEndpointType = leds.TypeURL
	ListenerType   = "type.googleapis.com/envoy.config.listener.v3.Listener"
	RouteType      = "type.googleapis.com/envoy.config.route.v3.RouteConfiguration"
	SecretType     = "type.googleapis.com/envoy.extensions.transport_sockets.tls.v3.Secret"
	// StalenessType is the StalenessPolicy pilot delivers to each Weft sidecar
	// (bootstrap/stalenesspb.TypeURL), one resource named "staleness". It is
	// covered by the manifest like everything else, so it goes before it.
	StalenessType = "type.googleapis.com/weft.staleness.v1.Policy"
	// ManifestType is the signed manifest (certs/manifest.TypeURL) pilot adds for each
	// Weft sidecar. It goes last: a sidecar activates a push once the manifest that
	// covers it has arrived.
	ManifestType = "type.googleapis.com/weft.manifest.v1.SignedManifest"
)

// PushOrder is the order in which types are sent.
var PushOrder = []string{ClusterType, EndpointType, LbEndpointType, ListenerType, RouteType, SecretType, StalenessType, ManifestType}

// Resource is one named xDS resource with its content hash as version.
type Resource struct {
	Name    string
	Any     *anypb.Any // marshalled once, deterministically
	Version string     // hex sha256 prefix of Any.Value
}

// Snapshot is immutable after New.
type Snapshot struct {
	Revision  int64                          // store revision it was generated from
	Resources map[string]map[string]Resource // type URL -> name -> resource
	versions  map[string]string              // type URL -> version of the whole set
}

// New marshals every message deterministically and computes per-resource and
// per-type versions. msgs maps type URL -> resource name -> message.
func New(revision int64, msgs map[string]map[string]proto.Message) (*Snapshot, error) {
	s := &Snapshot{Revision: revision, Resources: map[string]map[string]Resource{}, versions: map[string]string{}}
	for typ, byName := range msgs {
		out := make(map[string]Resource, len(byName))
		for name, m := range byName {
			r, err := NewResource(typ, name, m)
			if err != nil {
				return nil, err
			}
			out[name] = r
		}
		s.Resources[typ] = out
		s.versions[typ] = setVersion(out)
	}
	return s, nil
}

// NewResource marshals one message deterministically into a Resource. Resources
// are immutable values, so one Resource may be shared by many snapshots (gen
// builds the pieces every proxy shares once per mesh).
func NewResource(typ, name string, m proto.Message) (Resource, error) {
	b, err := proto.MarshalOptions{Deterministic: true}.Marshal(m)
	if err != nil {
		return Resource{}, fmt.Errorf("snapshot: marshal %s %q: %w", typ, name, err)
	}
	sum := sha256.Sum256(b)
	return Resource{Name: name, Any: &anypb.Any{TypeUrl: typ, Value: b}, Version: hex.EncodeToString(sum[:8])}, nil
}

// FromResources builds a snapshot from already marshalled resources (type URL ->
// name -> resource) and computes the per-type versions. The maps are kept, not
// copied: the caller must not change them afterwards (they may be shared with
// other snapshots, which is the point).
func FromResources(revision int64, res map[string]map[string]Resource) *Snapshot {
	s := &Snapshot{Revision: revision, Resources: res, versions: make(map[string]string, len(res))}
	for typ, byName := range res {
		s.versions[typ] = setVersion(byName)
	}
	return s
}

// Version is the version of all resources of one type (stable hash of names and
// per-resource versions); "" when the snapshot has no resources of that type.
func (s *Snapshot) Version(typ string) string { return s.versions[typ] }

// Names returns the sorted resource names of one type.
func (s *Snapshot) Names(typ string) []string {
	names := make([]string, 0, len(s.Resources[typ]))
	for n := range s.Resources[typ] {
		names = append(names, n)
	}
	sort.Strings(names)
	return names
}

func setVersion(rs map[string]Resource) string {
	if len(rs) == 0 {
		return ""
	}
	names := make([]string, 0, len(rs))
	for n := range rs {
		names = append(names, n)
	}
	sort.Strings(names)
	return NamesVersion(rs, names)
}

// NamesVersion hashes the given sorted names with their per-resource versions: the
// version of that selection of rs. Over every name it equals Version for the type,
// so a client subscribed to all names and one holding the whole set agree.
func NamesVersion(rs map[string]Resource, sortedNames []string) string {
	h := sha256.New()
	for _, n := range sortedNames {
		h.Write([]byte(n))
		h.Write([]byte{0})
		h.Write([]byte(rs[n].Version))
		h.Write([]byte{0})
	}
	return hex.EncodeToString(h.Sum(nil)[:8])
}

// Set is one type's resources with their set version computed once, so a set
// shared by many snapshots (every sidecar of a namespace has the same
// endpoints) is hashed once, not once per proxy. Immutable once built.
type Set struct {
	Resources map[string]Resource
	Version   string
}

// NewSet computes the set version of rs (kept, not copied).
func NewSet(rs map[string]Resource) Set { return Set{Resources: rs, Version: setVersion(rs)} }

// FromSets builds a snapshot from per-type sets without rehashing them; the
// result is the same as FromResources over the sets' resources.
func FromSets(revision int64, sets map[string]Set) *Snapshot {
	s := &Snapshot{Revision: revision, Resources: make(map[string]map[string]Resource, len(sets)), versions: make(map[string]string, len(sets))}
	for typ, set := range sets {
		s.Resources[typ] = set.Resources
		s.versions[typ] = set.Version
	}
	return s
}
