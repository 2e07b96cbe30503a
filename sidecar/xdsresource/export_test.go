package xdsresource

import (
	"google.golang.org/protobuf/proto"

	"github.com/weft-mesh/weft/sidecar/xdswire"
)

// FastRouteConfig is RDS decoding's fast path (routewire.go).
var FastRouteConfig = fastRouteConfig

// ReferenceRouteConfig is RDS decoding's reference path: the trimmed message,
// then decodeRouteConfig.
func ReferenceRouteConfig(b []byte) (*RouteConfig, error) {
	m := &xdswire.RouteConfiguration{}
	if err := proto.Unmarshal(b, m); err != nil {
		return nil, err
	}
	return decodeRouteConfig(m)
}
