// Command genproto writes xdswire.proto: the trimmed, wire-compatible mirror of
// the Envoy xDS messages the sidecar reads and writes. It derives every kept
// field (number, type, cardinality, oneof, deprecation) from go-control-plane's
// registered descriptors, so the mirror cannot drift by a typo; the spec below
// only says which messages and fields to keep. xdswire's compat test checks the
// result against the same registry.
//
// Rules the output follows (the "no silent drops" rule of sidecar/xdswire):
//   - a kept field of a message type the spec keeps refers to the trimmed type;
//     of a well-known type (google.protobuf.*, google.rpc.Status), to it; of any
//     other message type, it is opaque bytes (same wire form: length-delimited),
//     so its presence is still seen (singular opaque fields are `optional`);
//   - keeping one member of a oneof keeps all its members (opaque if need be),
//     so a decoder switching on the oneof sees the same case it saw with the
//     full type (a nil case would otherwise read "unset" for an unknown member);
//   - "*" keeps every field: the messages the decoder checks field by field
//     (onlyFields in sidecar/xdsresource/tls.go) refuse what they do not know,
//     and can only refuse what the schema has;
//   - every enum a kept field uses is kept whole.
//
// Run by go generate in sidecar/xdswire.
package main

import (
	"flag"
	"fmt"
	"go/format"
	"log"
	"os"
	"slices"
	"sort"
	"strings"

	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/reflect/protoregistry"
	"google.golang.org/protobuf/types/descriptorpb"

	// Register the Envoy descriptors the spec names.
	_ "github.com/weft-mesh/weft/sidecar/xdswire/internal/envoyreg"
)

// Package is the trimmed proto package.
const Package = "weft.xdswire.v1"

// renames give top-level Envoy messages whose short names collide in the one
// trimmed package a distinct name.
var renames = map[protoreflect.FullName]string{
	"envoy.extensions.filters.http.rbac.v3.RBAC":    "HttpRBAC",
	"envoy.extensions.filters.network.rbac.v3.RBAC": "NetworkRBAC",
}

const (
	core     = "envoy.config.core.v3."
	listener = "envoy.config.listener.v3."
	route    = "envoy.config.route.v3."
	cluster  = "envoy.config.cluster.v3."
	endpoint = "envoy.config.endpoint.v3."
	rbac     = "envoy.config.rbac.v3."
	matcher  = "envoy.type.matcher.v3."
	tls      = "envoy.extensions.transport_sockets.tls.v3."
	disc     = "envoy.service.discovery.v3."
	hcm      = "envoy.extensions.filters.network.http_connection_manager.v3."
	tcp      = "envoy.extensions.filters.network.tcp_proxy.v3."
)

// spec: each kept message and the fields kept ("*": all). Every field a
// decoder in sidecar/xdsresource or sidecar/xdsclient reads is here (the Go
// compiler says so); fields it never reads are left out and arrive as unknown
// fields, ignored exactly as the full types' decoder ignored them.
var spec = []struct {
	msg    protoreflect.FullName
	fields []string
}{
	// core
	{core + "Node", []string{"id", "cluster", "metadata", "locality", "user_agent_name", "client_features"}},
	{core + "Locality", []string{"region", "zone", "sub_zone"}},
	{core + "Metadata", []string{"filter_metadata"}},
	{core + "Address", []string{"socket_address"}},
	{core + "SocketAddress", []string{"protocol", "address", "port_value"}},
	{core + "CidrRange", []string{"address_prefix", "prefix_len"}},
	{core + "TransportSocket", []string{"name", "typed_config"}},
	{core + "DataSource", []string{"*"}},
	{core + "ConfigSource", []string{"ads", "resource_api_version", "initial_fetch_timeout"}},
	{core + "AggregatedConfigSource", []string{"*"}},
	{"envoy.type.v3.Percent", []string{"value"}},

	// listener
	{listener + "Listener", []string{"name", "address", "filter_chains", "default_filter_chain", "metadata", "api_listener"}},
	{listener + "FilterChain", []string{"filter_chain_match", "filters", "transport_socket", "name"}},
	{listener + "FilterChainMatch", []string{"*"}},
	{listener + "Filter", []string{"name", "typed_config"}},
	{hcm + "HttpConnectionManager", []string{"rds", "route_config", "http_filters"}},
	{hcm + "Rds", []string{"route_config_name"}},
	{hcm + "HttpFilter", []string{"name", "typed_config", "disabled"}},
	{tcp + "TcpProxy", []string{"cluster", "idle_timeout"}},
	{tcp + "TcpProxy.WeightedCluster", []string{"clusters"}},
	{tcp + "TcpProxy.WeightedCluster.ClusterWeight", []string{"name", "weight"}},

	// RBAC
	{"envoy.extensions.filters.http.rbac.v3.RBAC", []string{"rules", "matcher", "shadow_rules", "shadow_matcher"}},
	{"envoy.extensions.filters.network.rbac.v3.RBAC", []string{"rules", "matcher", "shadow_rules", "shadow_matcher", "enforcement_type", "delay_deny"}},
	{rbac + "RBAC", []string{"action", "policies", "audit_logging_options"}},
	{rbac + "Policy", []string{"permissions", "principals", "condition", "checked_condition", "cel_config"}},
	{rbac + "Permission", []string{"and_rules", "url_path", "header", "destination_port"}},
	{rbac + "Permission.Set", []string{"rules"}},
	{rbac + "Principal", []string{"and_ids", "authenticated"}},
	{rbac + "Principal.Set", []string{"ids"}},
	{rbac + "Principal.Authenticated", []string{"principal_name"}},
	{matcher + "PathMatcher", []string{"path"}},
	{matcher + "StringMatcher", []string{"*"}},
	{matcher + "RegexMatcher", []string{"regex"}},

	// route
	{route + "RouteConfiguration", []string{"name", "virtual_hosts"}},
	{route + "VirtualHost", []string{"name", "domains", "routes"}},
	{route + "Route", []string{"name", "match", "route", "metadata"}},
	{route + "RouteMatch", []string{"prefix", "case_sensitive", "headers", "query_parameters", "grpc", "cookies", "runtime_fraction", "dynamic_metadata", "tls_context"}},
	{route + "HeaderMatcher", []string{"name", "string_match", "invert_match", "treat_missing_header_as_empty"}},
	{route + "DirectResponseAction", []string{"status", "body"}},
	{route + "RouteAction", []string{"cluster", "timeout", "retry_policy", "hash_policy"}},
	{route + "WeightedCluster", []string{"clusters"}},
	{route + "WeightedCluster.ClusterWeight", []string{"name", "weight"}},
	{route + "RetryPolicy", []string{"retry_on", "num_retries", "per_try_timeout", "retry_back_off"}},
	{route + "RetryPolicy.RetryBackOff", []string{"base_interval", "max_interval"}},
	{route + "RouteAction.HashPolicy", []string{"header"}},
	{route + "RouteAction.HashPolicy.Header", []string{"header_name"}},
	{route + "RouteAction.HashPolicy.ConnectionProperties", []string{"source_ip"}},

	// cluster
	{cluster + "Cluster", []string{"name", "type", "eds_cluster_config", "load_assignment", "connect_timeout", "lb_policy",
		"ring_hash_lb_config", "circuit_breakers", "outlier_detection", "common_lb_config", "metadata", "http2_protocol_options",
		"typed_extension_protocol_options", "transport_socket", "transport_socket_matches"}},
	{cluster + "Cluster.EdsClusterConfig", []string{"service_name"}},
	{cluster + "Cluster.RingHashLbConfig", []string{"minimum_ring_size", "maximum_ring_size"}},
	{cluster + "Cluster.OriginalDstLbConfig", []string{"use_http_header", "http_header_name", "upstream_port_override", "metadata_key"}},
	{cluster + "Cluster.CommonLbConfig", []string{"healthy_panic_threshold"}},
	{cluster + "CircuitBreakers", []string{"thresholds"}},
	{cluster + "CircuitBreakers.Thresholds", []string{"priority", "max_connections", "max_pending_requests", "max_requests", "max_retries", "retry_budget"}},
	{cluster + "CircuitBreakers.Thresholds.RetryBudget", []string{"budget_percent", "min_retry_concurrency"}},
	{cluster + "OutlierDetection", []string{"consecutive_5xx", "interval", "base_ejection_time", "max_ejection_percent",
		"enforcing_consecutive_5xx", "enforcing_success_rate", "success_rate_minimum_hosts", "success_rate_request_volume",
		"success_rate_stdev_factor", "consecutive_gateway_failure", "enforcing_consecutive_gateway_failure",
		"split_external_local_origin_errors", "consecutive_local_origin_failure", "enforcing_consecutive_local_origin_failure",
		"enforcing_local_origin_success_rate", "failure_percentage_threshold", "enforcing_failure_percentage",
		"enforcing_failure_percentage_local_origin", "failure_percentage_minimum_hosts", "failure_percentage_request_volume",
		"max_ejection_time", "max_ejection_time_jitter"}},
	{"envoy.extensions.upstreams.http.v3.HttpProtocolOptions", []string{"explicit_http_config"}},
	{"envoy.extensions.upstreams.http.v3.HttpProtocolOptions.ExplicitHttpConfig", []string{"http2_protocol_options"}},

	// endpoint
	{endpoint + "ClusterLoadAssignment", []string{"cluster_name", "endpoints"}},
	{endpoint + "LocalityLbEndpoints", []string{"locality", "metadata", "lb_endpoints", "leds_cluster_locality_config", "load_balancing_weight", "priority"}},
	{endpoint + "LedsClusterLocalityConfig", []string{"leds_config", "leds_collection_name"}},
	{endpoint + "LbEndpoint", []string{"endpoint", "health_status", "metadata", "load_balancing_weight"}},
	{endpoint + "Endpoint", []string{"address"}},

	// TLS: checked field by field, so complete.
	{tls + "UpstreamTlsContext", []string{"*"}},
	{tls + "DownstreamTlsContext", []string{"*"}},
	{tls + "CommonTlsContext", []string{"*"}},
	{tls + "CommonTlsContext.CombinedCertificateValidationContext", []string{"*"}},
	{tls + "CertificateValidationContext", []string{"*"}},
	{tls + "SubjectAltNameMatcher", []string{"*"}},
	{tls + "CertificateProviderPluginInstance", []string{"*"}},
	{tls + "SdsSecretConfig", []string{"*"}},
	{tls + "TlsParameters", []string{"*"}},
	{tls + "Secret", []string{"*"}},

	// discovery
	{disc + "DiscoveryRequest", []string{"version_info", "node", "resource_names", "type_url", "response_nonce", "error_detail"}},
	{disc + "DiscoveryResponse", []string{"version_info", "resources", "type_url", "nonce"}},
	{disc + "DeltaDiscoveryRequest", []string{"node", "type_url", "resource_names_subscribe", "resource_names_unsubscribe", "initial_resource_versions", "response_nonce", "error_detail"}},
	{disc + "DeltaDiscoveryResponse", []string{"system_version_info", "resources", "type_url", "removed_resources", "nonce"}},
	{disc + "Resource", []string{"name", "version", "resource"}},
}

// passThrough are message types referred to as they are (linked anyway).
func passThrough(n protoreflect.FullName) bool {
	return strings.HasPrefix(string(n), "google.protobuf.") || n == "google.rpc.Status"
}

type gen struct {
	keep    map[protoreflect.FullName][]string
	enums   map[protoreflect.FullName]protoreflect.EnumDescriptor
	imports map[string]bool
}

func main() {
	out := flag.String("out", "xdswire.proto", "output file")
	mirror := flag.String("mirror", "mirror_gen_test.go", "output: the compat test's table of mirrored names")
	flag.Parse()
	g := &gen{keep: map[protoreflect.FullName][]string{}, enums: map[protoreflect.FullName]protoreflect.EnumDescriptor{}, imports: map[string]bool{}}
	var tops []protoreflect.MessageDescriptor
	for _, s := range spec {
		if _, dup := g.keep[s.msg]; dup {
			log.Fatalf("%s listed twice", s.msg)
		}
		g.keep[s.msg] = s.fields
	}
	for _, s := range spec {
		md := find(s.msg)
		if p, ok := md.Parent().(protoreflect.MessageDescriptor); ok {
			if _, kept := g.keep[p.FullName()]; !kept {
				log.Fatalf("%s: its parent %s is not kept", s.msg, p.FullName())
			}
		} else {
			tops = append(tops, md)
		}
	}
	// Twice: the first pass finds the enums kept fields use, wherever they
	// are nested; the second writes them.
	var body strings.Builder
	for range 2 {
		body.Reset()
		for _, md := range tops {
			g.message(&body, md, "")
		}
	}
	// Top-level enums used by kept fields.
	var enumNames []string
	for n := range g.enums {
		enumNames = append(enumNames, string(n))
	}
	sort.Strings(enumNames)
	for _, n := range enumNames {
		ed := g.enums[protoreflect.FullName(n)]
		if _, nested := ed.Parent().(protoreflect.MessageDescriptor); nested {
			continue
		}
		g.enum(&body, ed, "")
	}
	var f strings.Builder
	f.WriteString("// Code generated by sidecar/xdswire/internal/genproto from go-control-plane's descriptors. DO NOT EDIT.\n\n")
	f.WriteString("// The Envoy xDS messages the Weft sidecar reads and writes, trimmed to the\n// fields it uses, with Envoy's field numbers, types and cardinalities (see\n// sidecar/xdswire's package comment for the rules).\n")
	f.WriteString("syntax = \"proto3\";\n\npackage " + Package + ";\n\n")
	var imps []string
	for i := range g.imports {
		imps = append(imps, i)
	}
	sort.Strings(imps)
	for _, i := range imps {
		fmt.Fprintf(&f, "import %q;\n", i)
	}
	f.WriteString("\noption go_package = \"github.com/weft-mesh/weft/sidecar/xdswire\";\n")
	f.WriteString(body.String())
	if err := os.WriteFile(*out, []byte(f.String()), 0o644); err != nil {
		log.Fatal(err)
	}
	src, err := format.Source(g.mirrorTable(tops))
	if err != nil {
		log.Fatal(err)
	}
	if err := os.WriteFile(*mirror, src, 0o644); err != nil {
		log.Fatal(err)
	}
}

// mirrorTable is a Go test file: the Envoy name of each top-level trimmed
// message and enum (nested ones follow), and the messages kept complete.
func (g *gen) mirrorTable(tops []protoreflect.MessageDescriptor) []byte {
	var b strings.Builder
	b.WriteString("// Code generated by sidecar/xdswire/internal/genproto. DO NOT EDIT.\n\npackage xdswire_test\n\n")
	b.WriteString("import \"google.golang.org/protobuf/reflect/protoreflect\"\n\n")
	b.WriteString("// mirrors maps each top-level trimmed message and enum to the Envoy one it mirrors.\n")
	b.WriteString("var mirrors = map[protoreflect.FullName]protoreflect.FullName{\n")
	var lines []string
	for _, md := range tops {
		lines = append(lines, fmt.Sprintf("\t%q: %q,\n", Package+"."+trimmedName(md), md.FullName()))
	}
	for n, ed := range g.enums {
		if _, nested := ed.Parent().(protoreflect.MessageDescriptor); !nested {
			lines = append(lines, fmt.Sprintf("\t%q: %q,\n", Package+"."+trimmedName(ed), n))
		}
	}
	sort.Strings(lines)
	b.WriteString(strings.Join(lines, ""))
	b.WriteString("}\n\n// complete are the trimmed messages that keep every field of their Envoy message.\n")
	b.WriteString("var complete = []protoreflect.FullName{\n")
	lines = lines[:0]
	for _, s := range spec {
		if slices.Contains(s.fields, "*") {
			lines = append(lines, fmt.Sprintf("\t%q,\n", s.msg))
		}
	}
	sort.Strings(lines)
	b.WriteString(strings.Join(lines, ""))
	b.WriteString("}\n")
	return []byte(b.String())
}

func find(n protoreflect.FullName) protoreflect.MessageDescriptor {
	d, err := protoregistry.GlobalFiles.FindDescriptorByName(n)
	if err != nil {
		log.Fatalf("%s: %v", n, err)
	}
	md, ok := d.(protoreflect.MessageDescriptor)
	if !ok {
		log.Fatalf("%s is not a message", n)
	}
	return md
}

// trimmedName is the trimmed package's relative name for an Envoy message or enum.
func trimmedName(d protoreflect.Descriptor) string {
	if p, ok := d.Parent().(protoreflect.MessageDescriptor); ok {
		return trimmedName(p) + "." + string(d.Name())
	}
	if r, ok := renames[d.FullName()]; ok {
		return r
	}
	return string(d.Name())
}

func (g *gen) message(w *strings.Builder, md protoreflect.MessageDescriptor, indent string) {
	name := trimmedName(md)
	name = name[strings.LastIndex(name, ".")+1:]
	fmt.Fprintf(w, "\n%s// %s\n%smessage %s {\n", indent, md.FullName(), indent, name)
	in := indent + "  "
	want := g.keep[md.FullName()]
	all := slices.Contains(want, "*")
	keepField := map[protoreflect.Name]bool{}
	fds := md.Fields()
	for i := 0; i < fds.Len(); i++ {
		fd := fds.Get(i)
		if all || slices.Contains(want, string(fd.Name())) {
			keepField[fd.Name()] = true
			if od := fd.ContainingOneof(); od != nil && !od.IsSynthetic() {
				for j := 0; j < od.Fields().Len(); j++ {
					keepField[od.Fields().Get(j).Name()] = true
				}
			}
		}
	}
	for _, n := range want {
		if n != "*" && fds.ByName(protoreflect.Name(n)) == nil {
			log.Fatalf("%s has no field %s", md.FullName(), n)
		}
	}
	// Nested kept messages and the nested enums kept fields use.
	mds := md.Messages()
	for i := 0; i < mds.Len(); i++ {
		if _, ok := g.keep[mds.Get(i).FullName()]; ok {
			g.message(w, mds.Get(i), in)
		}
	}
	// Fields, in number order, oneofs grouped at their first member.
	done := map[protoreflect.Name]bool{}
	for i := 0; i < fds.Len(); i++ {
		fd := fds.Get(i)
		if !keepField[fd.Name()] || done[fd.Name()] {
			continue
		}
		if od := fd.ContainingOneof(); od != nil && !od.IsSynthetic() {
			fmt.Fprintf(w, "%soneof %s {\n", in, od.Name())
			for j := 0; j < od.Fields().Len(); j++ {
				of := od.Fields().Get(j)
				g.field(w, of, in+"  ", true)
				done[of.Name()] = true
			}
			fmt.Fprintf(w, "%s}\n", in)
			continue
		}
		g.field(w, fd, in, false)
		done[fd.Name()] = true
	}
	eds := md.Enums()
	for i := 0; i < eds.Len(); i++ {
		if _, ok := g.enums[eds.Get(i).FullName()]; ok {
			g.enum(w, eds.Get(i), in)
		}
	}
	fmt.Fprintf(w, "%s}\n", indent)
}

func (g *gen) field(w *strings.Builder, fd protoreflect.FieldDescriptor, in string, inOneof bool) {
	label := ""
	typ := ""
	switch {
	case fd.IsMap():
		typ = fmt.Sprintf("map<%s, %s>", g.typeName(fd.MapKey()), g.typeName(fd.MapValue()))
	case fd.IsList():
		label = "repeated "
		typ = g.typeName(fd)
	default:
		typ = g.typeName(fd)
		if !inOneof && (fd.HasOptionalKeyword() || (typ == "bytes" && fd.Kind() == protoreflect.MessageKind)) {
			label = "optional "
		}
	}
	opts := ""
	if o, ok := fd.Options().(*descriptorpb.FieldOptions); ok && o.GetDeprecated() {
		opts = " [deprecated = true]"
	}
	fmt.Fprintf(w, "%s%s%s %s = %d%s;\n", in, label, typ, fd.Name(), fd.Number(), opts)
}

// typeName is the trimmed type of a field (or map key/value): opaque bytes for
// message types not kept.
func (g *gen) typeName(fd protoreflect.FieldDescriptor) string {
	switch fd.Kind() {
	case protoreflect.MessageKind:
		md := fd.Message()
		if passThrough(md.FullName()) {
			g.imports[md.ParentFile().Path()] = true
			return "." + string(md.FullName())
		}
		if _, ok := g.keep[md.FullName()]; ok {
			return "." + Package + "." + trimmedName(md)
		}
		return "bytes"
	case protoreflect.GroupKind:
		log.Fatalf("%s: groups are not supported", fd.FullName())
	case protoreflect.EnumKind:
		ed := fd.Enum()
		g.enums[ed.FullName()] = ed
		if p, ok := ed.Parent().(protoreflect.MessageDescriptor); ok {
			if _, kept := g.keep[p.FullName()]; !kept {
				log.Fatalf("%s: enum %s is nested in %s, which is not kept", fd.FullName(), ed.FullName(), p.FullName())
			}
		}
		return "." + Package + "." + trimmedName(ed)
	}
	return fd.Kind().String()
}

func (g *gen) enum(w *strings.Builder, ed protoreflect.EnumDescriptor, in string) {
	fmt.Fprintf(w, "\n%s// %s\n%senum %s {\n", in, ed.FullName(), in, trimmedName(ed)[strings.LastIndex(trimmedName(ed), ".")+1:])
	vs := ed.Values()
	for i := 0; i < vs.Len(); i++ {
		v := vs.Get(i)
		fmt.Fprintf(w, "%s  %s = %d;\n", in, v.Name(), v.Number())
	}
	fmt.Fprintf(w, "%s}\n", in)
}
