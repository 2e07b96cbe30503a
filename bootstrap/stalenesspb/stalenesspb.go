// Package stalenesspb is the wire form of the StalenessPolicy pilot delivers to
// each Weft sidecar over ADS. Shared by both planes (pilot encodes, the sidecar
// decodes), so it imports neither.
package stalenesspb

//go:generate protoc --go_out=. --go_opt=paths=source_relative staleness.proto

// TypeURL is the xDS type URL of the policy resource; Name its only name (one
// policy per sidecar, wildcard-subscribed).
const (
	TypeURL = "type.googleapis.com/weft.staleness.v1.Policy"
	Name    = "staleness"
)
