// Package node holds a sidecar's identity and the xDS node metadata that carries it.
// It is the shared leaf between pilot and sidecar: both import it, it imports
// neither. A proxy without Weft metadata (proxyless gRPC, a debugging tool) decodes
// to a Node with only ID set and Registers()==false.
package node

import (
	"fmt"
	"net/netip"
	"slices"
	"sort"
	"strings"

	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/structpb"
)

// Metadata keys under Node.metadata. Prefixed so they never collide with keys other
// xDS clients set.
const (
	keyNamespace      = "weft.namespace"
	keyServiceAccount = "weft.serviceAccount"
	keyLabels         = "weft.labels"
	keyAddress        = "weft.address"
	keyInboundPort    = "weft.inboundPort"
	keyVersion        = "weft.version"
	keyInterception   = "weft.interception"
)

// Interception modes a sidecar reports (Node.Interception).
const (
	InterceptionNone     = ""         // explicit: apps address the sidecar
	InterceptionIPTables = "iptables" // iptables REDIRECT, SO_ORIGINAL_DST
	InterceptionEBPF     = "ebpf"     // cgroup eBPF connect redirect
)

// Node is one proxy's identity as it presents it to pilot.
type Node struct {
	ID             string
	Namespace      string
	ServiceAccount string
	Labels         map[string]string
	Address        string // workload IP the proxy registers as an endpoint
	InboundPort    uint32 // the sidecar's inbound listener port peers send to (15006)
	Locality       Locality
	Version        string // sidecar build version, informational
	// Interception is how the sidecar's traffic reaches it: "" (explicit),
	// "iptables" or "ebpf". Pilot makes an intercepted sidecar's endpoint
	// address:targetPort (its inbound capture takes it), an explicit one's
	// address:inboundPort.
	Interception string
	// Identity is the SPIFFE ID pilot verified for the node's stream (its TLS
	// client certificate), "" when the stream is not authenticated. Set by pilot
	// before generation; never read from or written to metadata, so a node cannot
	// claim one.
	Identity string
	// Proxyless: the node is a gRPC library (its user_agent_name starts with
	// "gRPC ", as grpc-go's "gRPC Go"), not a Weft sidecar.
	Proxyless bool
	// LEDS: the node takes endpoints incrementally (client_features holds
	// FeatureLEDS): pilot sends each ClusterLoadAssignment with per-locality
	// leds_cluster_locality_config and every endpoint as its own LbEndpoint
	// resource, so an endpoint change is one resource, not the whole
	// assignment. A node without it gets whole assignments.
	LEDS bool
}

// FeatureLEDS is the client_features entry a Weft sidecar advertises when it
// merges LbEndpoint resources into their ClusterLoadAssignment (Node.LEDS).
// Other client features are ignored, not kept.
const FeatureLEDS = "weft.leds.v1"

// IsProxylessAgent reports whether a node's user_agent_name is a gRPC
// library's ("gRPC Go", "gRPC Java", "gRPC C++"...).
func IsProxylessAgent(userAgent string) bool { return strings.HasPrefix(userAgent, "gRPC ") }

// Bounds on what a node may present. FromWire refuses anything past them, so one
// stream's first request cannot make pilot hold megabytes (a 1 MiB node id, 50,000
// labels). They are at least what bootstrap/render lets a sidecar send.
const (
	// MaxIDBytes bounds the node id (render allows 253: a DNS subdomain).
	MaxIDBytes = 256
	// MaxLabels bounds the labels, as pilot/resource.MaxLabels bounds a
	// Workload's (a test keeps them equal).
	MaxLabels = 64
	// MaxLabelKeyBytes is a Kubernetes qualified name: a 253-byte prefix, '/'
	// and a 63-byte name.
	MaxLabelKeyBytes = 317
	// MaxLabelValueBytes is render's per-value bound (Kubernetes allows 63).
	MaxLabelValueBytes = 256
	// MaxFieldBytes bounds every other string the node gives: namespace,
	// service account, address, version and each locality segment.
	MaxFieldBytes = 256
	// MaxMetadataBytes bounds node.metadata as encoded: 64 labels at their
	// largest are about 37 KiB.
	MaxMetadataBytes = 64 << 10
	// MaxClientFeatures bounds client_features (grpc-go sends 2, a Weft
	// sidecar 1); only FeatureLEDS is read from them.
	MaxClientFeatures = 32
)

// Locality is region/zone/subzone.
type Locality struct{ Region, Zone, SubZone string }

// ParseLocality parses "region/zone/subzone" (any suffix may be missing).
func ParseLocality(s string) (Locality, error) {
	if s == "" {
		return Locality{}, nil
	}
	parts := strings.Split(s, "/")
	if len(parts) > 3 {
		return Locality{}, fmt.Errorf("locality %q: want region/zone/subzone", s)
	}
	var l Locality
	for i, p := range parts {
		if p == "" {
			return Locality{}, fmt.Errorf("locality %q: empty segment %d", s, i)
		}
	}
	l.Region = parts[0]
	if len(parts) > 1 {
		l.Zone = parts[1]
	}
	if len(parts) > 2 {
		l.SubZone = parts[2]
	}
	return l, nil
}

func (l Locality) String() string {
	switch {
	case l.SubZone != "":
		return l.Region + "/" + l.Zone + "/" + l.SubZone
	case l.Zone != "":
		return l.Region + "/" + l.Zone
	}
	return l.Region
}

// Registers reports whether the node carries a workload registration (a Weft
// sidecar) rather than being a plain xDS client.
// A proxyless gRPC node never does: pilot fills its namespace in from its
// certificate, and its address names the Workload it serves (gen's server
// listeners), not a sidecar inbound listener.
func (n *Node) Registers() bool { return n.Namespace != "" && n.Address != "" && !n.Proxyless }

// Validate checks what a registering sidecar presents.
func (n *Node) Validate() error {
	if n.ID == "" {
		return fmt.Errorf("node: id: required")
	}
	if n.Address != "" && (n.Registers() || n.Proxyless) { // a proxyless server's address names its Workload
		if _, err := netip.ParseAddr(n.Address); err != nil {
			return fmt.Errorf("node %s: address: %q is not an IP literal", n.ID, n.Address)
		}
	}
	if !n.Registers() {
		return nil
	}
	if n.InboundPort > 65535 {
		return fmt.Errorf("node %s: inboundPort: %d out of range", n.ID, n.InboundPort)
	}
	switch n.Interception {
	case InterceptionNone, InterceptionIPTables, InterceptionEBPF:
	default:
		return fmt.Errorf("node %s: interception: %q is not one of iptables, ebpf (or empty: explicit)", n.ID, n.Interception)
	}
	return nil
}

// Wire is the part of an xDS core.Node (envoy.config.core.v3.Node) Weft writes
// and reads, apart from the generated type that carries it: pilot converts
// go-control-plane's (bootstrap/node/envoynode), the sidecar its trimmed one
// (sidecar/xdswire), so this package links neither.
type Wire struct {
	ID, Cluster, UserAgentName string
	Metadata                   *structpb.Struct
	Locality                   *Locality // nil: none
	ClientFeatures             []string
}

// UserAgent is the user_agent_name a Weft sidecar sends.
const UserAgent = "weft-sidecar"

// ToWire renders the node as an xDS core.Node's fields.
func (n *Node) ToWire() Wire {
	fields := map[string]*structpb.Value{}
	if n.Namespace != "" {
		fields[keyNamespace] = structpb.NewStringValue(n.Namespace)
	}
	if n.ServiceAccount != "" {
		fields[keyServiceAccount] = structpb.NewStringValue(n.ServiceAccount)
	}
	if n.Address != "" {
		fields[keyAddress] = structpb.NewStringValue(n.Address)
	}
	if n.InboundPort != 0 {
		fields[keyInboundPort] = structpb.NewNumberValue(float64(n.InboundPort))
	}
	if n.Version != "" {
		fields[keyVersion] = structpb.NewStringValue(n.Version)
	}
	if n.Interception != "" {
		fields[keyInterception] = structpb.NewStringValue(n.Interception)
	}
	if len(n.Labels) > 0 {
		lf := map[string]*structpb.Value{}
		for k, v := range n.Labels {
			lf[k] = structpb.NewStringValue(v)
		}
		fields[keyLabels] = structpb.NewStructValue(&structpb.Struct{Fields: lf})
	}
	p := Wire{ID: n.ID, Cluster: n.Namespace, UserAgentName: UserAgent, Metadata: &structpb.Struct{Fields: fields}}
	if n.Locality != (Locality{}) {
		l := n.Locality
		p.Locality = &l
	}
	if n.LEDS {
		p.ClientFeatures = []string{FeatureLEDS}
	}
	return p
}

// FromWire reads a Node from an xDS core.Node's fields; missing Weft metadata
// is not an error (the result simply does not register). Wrong types are, and
// so is anything past the bounds above (checked before anything is copied).
func FromWire(p Wire) (*Node, error) {
	if id := p.ID; len(id) > MaxIDBytes {
		return nil, fmt.Errorf("node id %q...: %d bytes, limit %d", id[:32], len(id), MaxIDBytes)
	}
	if cf := p.ClientFeatures; len(cf) > MaxClientFeatures {
		return nil, fmt.Errorf("node %s: client_features: %d entries, limit %d", p.ID, len(cf), MaxClientFeatures)
	}
	n := &Node{ID: p.ID, Proxyless: IsProxylessAgent(p.UserAgentName), LEDS: slices.Contains(p.ClientFeatures, FeatureLEDS)}
	if sz := proto.Size(p.Metadata); sz > MaxMetadataBytes {
		return nil, fmt.Errorf("node %s: metadata: %d bytes, limit %d", n.ID, sz, MaxMetadataBytes)
	}
	if l := p.Locality; l != nil {
		for _, seg := range [...]struct{ name, v string }{{"region", l.Region}, {"zone", l.Zone}, {"sub_zone", l.SubZone}} {
			if len(seg.v) > MaxFieldBytes {
				return nil, fmt.Errorf("node %s: locality.%s: %d bytes, limit %d", n.ID, seg.name, len(seg.v), MaxFieldBytes)
			}
		}
		n.Locality = *l
	}
	f := p.Metadata.GetFields()
	str := func(key string, dst *string) error {
		v, ok := f[key]
		if !ok {
			return nil
		}
		s, ok := v.GetKind().(*structpb.Value_StringValue)
		if !ok {
			return fmt.Errorf("node %s: metadata.%s: want string", n.ID, key)
		}
		if len(s.StringValue) > MaxFieldBytes {
			return fmt.Errorf("node %s: metadata.%s: %d bytes, limit %d", n.ID, key, len(s.StringValue), MaxFieldBytes)
		}
		*dst = s.StringValue
		return nil
	}
	for key, dst := range map[string]*string{keyNamespace: &n.Namespace, keyServiceAccount: &n.ServiceAccount, keyAddress: &n.Address, keyVersion: &n.Version, keyInterception: &n.Interception} {
		if err := str(key, dst); err != nil {
			return nil, err
		}
	}
	if v, ok := f[keyInboundPort]; ok {
		num, ok := v.GetKind().(*structpb.Value_NumberValue)
		if !ok || num.NumberValue < 0 || num.NumberValue > 65535 || num.NumberValue != float64(uint32(num.NumberValue)) {
			return nil, fmt.Errorf("node %s: metadata.%s: want a port number", n.ID, keyInboundPort)
		}
		n.InboundPort = uint32(num.NumberValue)
	}
	if v, ok := f[keyLabels]; ok {
		st, ok := v.GetKind().(*structpb.Value_StructValue)
		if !ok {
			return nil, fmt.Errorf("node %s: metadata.%s: want a map of strings", n.ID, keyLabels)
		}
		lf := st.StructValue.GetFields()
		if len(lf) > MaxLabels {
			return nil, fmt.Errorf("node %s: metadata.%s: %d labels, limit %d", n.ID, keyLabels, len(lf), MaxLabels)
		}
		n.Labels = make(map[string]string, len(lf))
		for k, lv := range lf {
			s, ok := lv.GetKind().(*structpb.Value_StringValue)
			if !ok {
				return nil, fmt.Errorf("node %s: metadata.%s.%s: want string", n.ID, keyLabels, k)
			}
			if len(k) > MaxLabelKeyBytes {
				return nil, fmt.Errorf("node %s: metadata.%s: key %q...: %d bytes, limit %d", n.ID, keyLabels, k[:32], len(k), MaxLabelKeyBytes)
			}
			if len(s.StringValue) > MaxLabelValueBytes {
				return nil, fmt.Errorf("node %s: metadata.%s.%s: value %d bytes, limit %d", n.ID, keyLabels, k, len(s.StringValue), MaxLabelValueBytes)
			}
			n.Labels[k] = s.StringValue
		}
	}
	if err := n.Validate(); err != nil {
		return nil, err
	}
	return n, nil
}

// LabelString renders labels as sorted k=v,k=v.
func LabelString(l map[string]string) string {
	keys := make([]string, 0, len(l))
	for k := range l {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	parts := make([]string, len(keys))
	for i, k := range keys {
		parts[i] = k + "=" + l[k]
	}
	return strings.Join(parts, ",")
}
