// Package envoynode converts a node.Node to and from go-control-plane's
// core.Node, for pilot and the tools that speak xDS with the full Envoy types.
// The sidecar uses sidecar/xdswire's trimmed Node instead (its binary links no
// go-control-plane package), so this conversion lives apart from package node.
package envoynode

import (
	"fmt"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"

	"github.com/weft-mesh/weft/bootstrap/node"
)

// ToProto renders the node as an Envoy core.Node.
func ToProto(n *node.Node) *corev3.Node {
	w := n.ToWire()
	p := &corev3.Node{Id: w.ID, Cluster: w.Cluster, UserAgentName: w.UserAgentName, Metadata: w.Metadata, ClientFeatures: w.ClientFeatures}
	if l := w.Locality; l != nil {
		p.Locality = &corev3.Locality{Region: l.Region, Zone: l.Zone, SubZone: l.SubZone}
	}
	return p
}

// FromProto reads a Node from an Envoy core.Node (node.FromWire says how).
func FromProto(p *corev3.Node) (*node.Node, error) {
	if p == nil {
		return nil, fmt.Errorf("node: missing")
	}
	w := node.Wire{ID: p.GetId(), Cluster: p.GetCluster(), UserAgentName: p.GetUserAgentName(), Metadata: p.GetMetadata(), ClientFeatures: p.GetClientFeatures()}
	if l := p.GetLocality(); l != nil {
		w.Locality = &node.Locality{Region: l.GetRegion(), Zone: l.GetZone(), SubZone: l.GetSubZone()}
	}
	return node.FromWire(w)
}
