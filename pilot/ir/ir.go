// Package ir is the compiled, proto-free, immutable model of the mesh at one store
// revision: what compile produces and gen consumes.
package ir

// Mesh is immutable once returned by compile.Compile.
type Mesh struct {
	Revision int64
	// The rest is defined by the compile/gen work (services, endpoints, routes,
	// destination policies, authorization, staleness, overrides).
}
