package dataplanetest

import (
	"encoding/json"
	"os"
	"path/filepath"
	"sort"
	"testing"

	"sigs.k8s.io/yaml"
)

// GenGolden is one proxy's snapshot in one of pilot's gen golden files
// (pilot/xds/gen/testdata/*.golden.yaml): protojson resources by type short
// name (Listener, Cluster, LbEndpoint...) and resource name.
type GenGolden struct {
	File, Proxy string
	Types       map[string]map[string]json.RawMessage
}

// GenGoldens reads the gen golden files pattern matches (a glob, relative to
// the test's package), proxies in file then name order; none is a failure.
func GenGoldens(tb testing.TB, pattern string) []GenGolden {
	tb.Helper()
	files, err := filepath.Glob(pattern)
	if err != nil || len(files) == 0 {
		tb.Fatalf("no gen goldens at %s: %v", pattern, err)
	}
	var out []GenGolden
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			tb.Fatal(err)
		}
		var doc struct {
			Proxies map[string]map[string]struct {
				Resources map[string]json.RawMessage `json:"resources"`
			} `json:"proxies"`
		}
		j, err := yaml.YAMLToJSON(b)
		if err != nil {
			tb.Fatalf("%s: %v", f, err)
		}
		if err := json.Unmarshal(j, &doc); err != nil {
			tb.Fatalf("%s: %v", f, err)
		}
		for proxy, types := range doc.Proxies {
			g := GenGolden{File: f, Proxy: proxy, Types: make(map[string]map[string]json.RawMessage, len(types))}
			for short, set := range types {
				g.Types[short] = set.Resources
			}
			out = append(out, g)
		}
	}
	sort.Slice(out, func(i, j int) bool {
		if out[i].File != out[j].File {
			return out[i].File < out[j].File
		}
		return out[i].Proxy < out[j].Proxy
	})
	return out
}
