// Package compile turns one store revision (plus the workloads connected sidecars
// registered) into an immutable ir.Mesh.
package compile

import (
	"github.com/weft-mesh/weft/bootstrap/node"
	"github.com/weft-mesh/weft/pilot/ir"
	"github.com/weft-mesh/weft/pilot/resource"
)

// Input is everything Compile reads; it reads nothing else.
type Input struct {
	Revision int64
	Objects  []*resource.Object // every object stored at Revision
	Proxies  []*node.Node       // connected sidecars that register their own workload
}

// Compile builds the mesh. Stub: the real implementation replaces this file.
func Compile(in Input) (*ir.Mesh, error) {
	return &ir.Mesh{Revision: in.Revision}, nil
}
