package xdsresource_test

import (
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"testing"

	clusterv3 "github.com/envoyproxy/go-control-plane/envoy/config/cluster/v3"
	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	endpointv3 "github.com/envoyproxy/go-control-plane/envoy/config/endpoint/v3"
	listenerv3 "github.com/envoyproxy/go-control-plane/envoy/config/listener/v3"
	routev3 "github.com/envoyproxy/go-control-plane/envoy/config/route/v3"
	_ "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/router/v3"
	_ "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/listener/original_dst/v3"
	tlsv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/transport_sockets/tls/v3"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/types/known/anypb"

	dt "github.com/weft-mesh/weft/sidecar/dataplane/dataplanetest"
	"github.com/weft-mesh/weft/sidecar/xdsresource"
	"github.com/weft-mesh/weft/sidecar/xdswire"
)

// ignored are the Envoy fields pilot sends (or the test builders set) that the
// trimmed schema leaves out, because the sidecar's decoder never read them: each
// with why ignoring it is right. A field pilot starts sending that is neither
// here nor in the schema fails TestNoUnknownFields: decide, then add it to the
// schema (genproto's spec) and the decoder, or here.
var ignored = map[protoreflect.FullName]string{
	"envoy.config.listener.v3.Listener.listener_filters":                                            "original_dst: the sidecar reads SO_ORIGINAL_DST (or its eBPF map) on every intercepted connection itself",
	"envoy.config.cluster.v3.Cluster.EdsClusterConfig.eds_config":                                   "EDS always comes on the ADS stream",
	"envoy.extensions.filters.network.http_connection_manager.v3.HttpConnectionManager.stat_prefix": "stats are the sidecar's own (/metrics)",
	"envoy.extensions.filters.network.http_connection_manager.v3.Rds.config_source":                 "RDS always comes on the ADS stream",
	"envoy.extensions.filters.network.tcp_proxy.v3.TcpProxy.stat_prefix":                            "stats are the sidecar's own (/metrics)",
	"envoy.extensions.filters.network.rbac.v3.RBAC.stat_prefix":                                     "stats are the sidecar's own (/metrics)",
	"envoy.extensions.filters.http.rbac.v3.RBAC.shadow_rules_stat_prefix":                           "stats are the sidecar's own (/metrics)",
	// Ignored by the decoder before the trimmed types too (a gap, not new):
	// the sidecar applies the route timeout, not grpc-timeout capped by this.
	"envoy.config.route.v3.RouteAction.max_stream_duration": "grpc routes: the route timeout applies (the sidecar does not read grpc-timeout)",
}

// unpacked are the Any type URLs the decoder opens, with their full and
// trimmed types: the walk follows them.
var unpacked = map[string]func() proto.Message{
	"type.googleapis.com/envoy.extensions.filters.network.http_connection_manager.v3.HttpConnectionManager": func() proto.Message { return &xdswire.HttpConnectionManager{} },
	"type.googleapis.com/envoy.extensions.filters.network.tcp_proxy.v3.TcpProxy":                            func() proto.Message { return &xdswire.TcpProxy{} },
	xdsresource.HTTPRBACTypeURL:    func() proto.Message { return &xdswire.HttpRBAC{} },
	xdsresource.NetworkRBACTypeURL: func() proto.Message { return &xdswire.NetworkRBAC{} },
	"type.googleapis.com/envoy.extensions.transport_sockets.tls.v3.UpstreamTlsContext":   func() proto.Message { return &xdswire.UpstreamTlsContext{} },
	"type.googleapis.com/envoy.extensions.transport_sockets.tls.v3.DownstreamTlsContext": func() proto.Message { return &xdswire.DownstreamTlsContext{} },
	"type.googleapis.com/envoy.extensions.upstreams.http.v3.HttpProtocolOptions":         func() proto.Message { return &xdswire.HttpProtocolOptions{} },
}

// dropped walks a full message beside the trimmed decoding of the same bytes
// and records every set field of the full one the trimmed schema lacks.
func dropped(t *testing.T, full, trimmed protoreflect.Message, path string, out map[protoreflect.FullName][]string) {
	tfs := trimmed.Descriptor().Fields()
	full.Range(func(fd protoreflect.FieldDescriptor, v protoreflect.Value) bool {
		p := path + "." + string(fd.Name())
		tf := tfs.ByNumber(fd.Number())
		if tf == nil {
			out[fd.FullName()] = append(out[fd.FullName()], p)
			return true
		}
		if fd.Kind() != protoreflect.MessageKind || tf.Kind() != protoreflect.MessageKind {
			return true // scalars; an opaque field keeps all its bytes
		}
		tv := trimmed.Get(tf)
		switch {
		case fd.IsMap():
			if fd.MapValue().Kind() != protoreflect.MessageKind {
				return true
			}
			v.Map().Range(func(k protoreflect.MapKey, mv protoreflect.Value) bool {
				pair(t, mv.Message(), tv.Map().Get(k).Message(), p+"["+k.String()+"]", out)
				return true
			})
		case fd.IsList():
			for i := 0; i < v.List().Len(); i++ {
				pair(t, v.List().Get(i).Message(), tv.List().Get(i).Message(), p+"[]", out)
			}
		default:
			pair(t, v.Message(), tv.Message(), p, out)
		}
		return true
	})
}

// pair walks two messages of mirrored types; Anys the decoder opens are opened.
func pair(t *testing.T, full, trimmed protoreflect.Message, path string, out map[protoreflect.FullName][]string) {
	if full.Descriptor().FullName() != "google.protobuf.Any" {
		dropped(t, full, trimmed, path, out)
		return
	}
	a := full.Interface().(*anypb.Any)
	mk, ok := unpacked[a.GetTypeUrl()]
	if !ok {
		return
	}
	fm, err := a.UnmarshalNew()
	if err != nil {
		t.Fatalf("%s: %v", path, err)
	}
	tm := mk()
	if err := proto.Unmarshal(a.GetValue(), tm); err != nil {
		t.Fatalf("%s: trimmed: %v", path, err)
	}
	dropped(t, fm.ProtoReflect(), tm.ProtoReflect(), path+"("+string(fm.ProtoReflect().Descriptor().Name())+")", out)
}

// resource is one top-level resource in both forms' constructors.
type resource struct {
	name    string
	full    proto.Message
	trimmed func() proto.Message
}

var kinds = map[string]func() (proto.Message, proto.Message){
	"Listener": func() (proto.Message, proto.Message) { return &listenerv3.Listener{}, &xdswire.Listener{} },
	"RouteConfiguration": func() (proto.Message, proto.Message) {
		return &routev3.RouteConfiguration{}, &xdswire.RouteConfiguration{}
	},
	"Cluster": func() (proto.Message, proto.Message) { return &clusterv3.Cluster{}, &xdswire.Cluster{} },
	"ClusterLoadAssignment": func() (proto.Message, proto.Message) {
		return &endpointv3.ClusterLoadAssignment{}, &xdswire.ClusterLoadAssignment{}
	},
	"Secret":     func() (proto.Message, proto.Message) { return &tlsv3.Secret{}, &xdswire.Secret{} },
	"LbEndpoint": func() (proto.Message, proto.Message) { return &endpointv3.LbEndpoint{}, &xdswire.LbEndpoint{} },
}

// goldenResources reads every resource of pilot's golden snapshots
// (pilot/xds/gen/testdata/*.golden.yaml, protojson as YAML) into full types.
func goldenResources(t testing.TB) []resource {
	var out []resource
	for _, g := range dt.GenGoldens(t, "../../pilot/xds/gen/testdata/*.golden.yaml") {
		for kind, rs := range g.Types {
			mk, ok := kinds[kind]
			if !ok {
				continue // weft's own Policy (staleness): a weft proto, complete
			}
			for name, raw := range rs {
				full, _ := mk()
				label := filepath.Base(g.File) + " " + g.Proxy + " " + kind + " " + name
				if err := protojson.Unmarshal(raw, full); err != nil {
					t.Fatalf("%s: %v", label, err)
				}
				out = append(out, resource{name: label, full: full, trimmed: func() proto.Message { _, tm := mk(); return tm }})
			}
		}
	}
	return out
}

// builtResources are what dataplanetest's builders make (the sidecar's own
// tests' inputs).
func builtResources() []resource {
	var ms []proto.Message
	r := dt.Simple("outbound", dt.MustAddr("127.0.0.1:15001"), true, dt.MustAddr("10.0.0.1:15006"))
	for _, tu := range []string{xdsresource.ListenerType, xdsresource.RouteType, xdsresource.ClusterType, xdsresource.EndpointType} {
		ms = append(ms, r[tu]...)
	}
	peer := dt.MustAddr("10.0.0.2:15006")
	tc := dt.EDSCluster("t", dt.ClusterOpts{})
	tc.TransportSocket = dt.UpstreamTLS("t", []string{"h2"}, "spiffe://cluster.local/ns/a/sa/b")
	ms = append(ms, inboundWithRBAC(), dt.MarkPeer(dt.Endpoints("c", dt.MustAddr("10.0.0.1:8080"), peer), peer),
		dt.RootCA([]byte("bundle"), []byte("crl")), tc,
		dt.Listener("inbound", dt.MustAddr("10.0.0.1:15006"), dt.WithTransport(dt.HTTPChain(15006, "r"), "tls")),
		dt.OriginalDstCluster("passthrough", 0), dt.BlackHoleCluster("blackhole"))
	// LEDS form: a locality naming a collection, and one of its LbEndpoints.
	ledsCLA := &endpointv3.ClusterLoadAssignment{ClusterName: "c", Endpoints: []*endpointv3.LocalityLbEndpoints{{
		Locality: &corev3.Locality{Region: "r", Zone: "z"},
		LbConfig: &endpointv3.LocalityLbEndpoints_LedsClusterLocalityConfig{LedsClusterLocalityConfig: &endpointv3.LedsClusterLocalityConfig{
			LedsConfig:         &corev3.ConfigSource{ConfigSourceSpecifier: &corev3.ConfigSource_Ads{Ads: &corev3.AggregatedConfigSource{}}, ResourceApiVersion: corev3.ApiVersion_V3},
			LedsCollectionName: "xdstp://weft/envoy.config.endpoint.v3.LbEndpoint/c/r,z,/*",
		}},
	}}}
	lbe := dt.MarkPeer(dt.Endpoints("c", peer), peer).GetEndpoints()[0].GetLbEndpoints()[0]
	ms = append(ms, ledsCLA, lbe)
	var out []resource
	for _, m := range ms {
		kind := string(m.ProtoReflect().Descriptor().Name())
		mk := kinds[kind]
		out = append(out, resource{name: "dataplanetest " + kind, full: m, trimmed: func() proto.Message { _, tm := mk(); return tm }})
	}
	return out
}

// TestNoUnknownFields: decoding what pilot generates (its golden snapshots)
// and what the sidecar's tests build with the trimmed types leaves out only
// fields in ignored. The rule (sidecar/xdswire): every field the decoder reads
// or refuses is in the trimmed schema, so a field missing from it is one the
// decoder ignored with the full types too; this test keeps that list explicit.
func TestNoUnknownFields(t *testing.T) {
	rs := append(goldenResources(t), builtResources()...)
	found := map[protoreflect.FullName][]string{}
	for _, r := range rs {
		b, err := proto.Marshal(r.full)
		if err != nil {
			t.Fatalf("%s: %v", r.name, err)
		}
		tm := r.trimmed()
		if err := proto.Unmarshal(b, tm); err != nil {
			t.Fatalf("%s: trimmed: %v", r.name, err)
		}
		dropped(t, r.full.ProtoReflect(), tm.ProtoReflect(), r.name, found)
	}
	var names []string
	for n := range found {
		names = append(names, string(n))
	}
	sort.Strings(names)
	for _, n := range names {
		if _, ok := ignored[protoreflect.FullName(n)]; !ok {
			t.Errorf("%s is sent (%d times, e.g. %s) but neither in the trimmed schema nor ignored on purpose", n, len(found[protoreflect.FullName(n)]), found[protoreflect.FullName(n)][0])
		}
	}
	for n := range ignored {
		if _, ok := found[n]; !ok {
			t.Errorf("ignored lists %s, which nothing sends any more: remove it", n)
		}
	}
	if len(rs) < 100 || !slices.ContainsFunc(rs, func(r resource) bool { return strings.Contains(r.name, "Secret") }) {
		t.Errorf("walked %d resources: the golden snapshots look missing", len(rs))
	}
}
