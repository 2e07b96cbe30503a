// Package gen turns an ir.Mesh and one proxy into that proxy's consistent xDS
// snapshot. It reads only its arguments (no store, no clock).
package gen

import (
	"github.com/weft-mesh/weft/bootstrap/node"
	"github.com/weft-mesh/weft/pilot/ir"
	"github.com/weft-mesh/weft/pilot/xds/snapshot"
	"google.golang.org/protobuf/proto"
)

// Proxy generates the snapshot for n. A node without Weft metadata (proxyless gRPC,
// debugging tools) gets the whole mesh and asks for what it needs by name.
// Stub: the real implementation replaces this file.
func Proxy(mesh *ir.Mesh, n *node.Node) (*snapshot.Snapshot, error) {
	return snapshot.New(mesh.Revision, map[string]map[string]proto.Message{})
}
