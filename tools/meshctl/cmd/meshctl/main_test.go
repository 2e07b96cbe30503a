package main

import (
	"testing"

	"go.uber.org/goleak"

	"github.com/weft-mesh/weft/internal/version/versiontest"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// The real binary, linked as `make build` links it, reports the version set by -ldflags.
func TestVersion(t *testing.T) {
	versiontest.Check(t, versiontest.Build(t, "github.com/weft-mesh/weft/tools/meshctl/cmd/meshctl"), "meshctl")
}
