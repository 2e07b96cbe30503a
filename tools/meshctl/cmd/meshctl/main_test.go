package main

import (
	"testing"

	"go.uber.org/goleak"

	"github.com/weft-mesh/weft/internal/version/versiontest"
	"github.com/weft-mesh/weft/tools/testkit/proc"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m, goleak.Cleanup(proc.Cleanup)) }

// The real binary, linked as `make build` links it, reports the version set by -ldflags.
func TestVersion(t *testing.T) {
	versiontest.Check(t, proc.Build(t, proc.Meshctl), "meshctl")
}
