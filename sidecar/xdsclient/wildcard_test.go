package xdsclient

import (
	"slices"
	"testing"
)

// SotW: LDS and CDS subscribe to everything with no names (legacy wildcard); any
// other wildcard type (the Weft manifest) must name "*" or a strict server such as
// pilot sends nothing.
func TestSotWExplicitWildcard(t *testing.T) {
	const manifestType = "type.googleapis.com/weft.manifest.v1.SignedManifest"
	cfg := testConfig(t, SotW, &applier{})
	cfg.Types = append(slices.Clone(allTypes), manifestType)
	e := newEngine(cfg.withDefaults())
	got := map[string][]string{}
	for _, r := range e.initialSotW() {
		got[r.GetTypeUrl()] = r.GetResourceNames()
	}
	tests := []struct {
		typ  string
		want []string
	}{
		{TypeListener, nil},
		{TypeCluster, nil},
		{manifestType, []string{"*"}},
	}
	for _, tc := range tests {
		names, ok := got[tc.typ]
		if !ok || !slices.Equal(names, tc.want) {
			t.Errorf("%s: names %q (sent %v), want %q", ShortName(tc.typ), names, ok, tc.want)
		}
	}
}
