package ca_test

import (
	"github.com/weft-mesh/weft/pilot/ca"
	"github.com/weft-mesh/weft/pilot/server"
	"github.com/weft-mesh/weft/pilot/xds/publish"
)

// Service is what pilot/server runs as its mesh CA, and the Trust source
// pilot/xds/publish sends as ROOTCA. (An external test package: pilot/server
// imports pilot/xds/publish, which imports pilot/ca.)
var (
	_ server.Authority    = (*ca.Service)(nil)
	_ publish.TrustSource = (*ca.Service)(nil)
)
