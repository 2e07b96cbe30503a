package resource

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// realisticInput is every example file joined, repeated with renamed namespaces
// to n copies: a mix of all kinds as a user's directory would hold.
func realisticInput(b *testing.B, copies int) []byte {
	b.Helper()
	files, err := filepath.Glob("../../examples/*.yaml")
	if err != nil || len(files) == 0 {
		b.Fatalf("examples: %v", err)
	}
	var one strings.Builder
	for _, f := range files {
		data, err := os.ReadFile(f)
		if err != nil {
			b.Fatal(err)
		}
		one.WriteString("---\n")
		one.Write(data)
	}
	var all strings.Builder
	for i := range copies {
		s := strings.ReplaceAll(one.String(), "namespace: shop", fmt.Sprintf("namespace: shop%d", i))
		if i > 0 { // one MeshConfig only
			s = strings.Replace(s, "kind: MeshConfig", "kind: PeerAuthentication", 1)
			s = strings.Replace(s, "metadata: {name: default}\nspec:\n  trustDomain: cluster.local\n  defaultMtls: STRICT\n  certificateTTL: 24h",
				fmt.Sprintf("metadata: {name: strict, namespace: shop%d}\nspec: {mtls: STRICT}", i), 1)
		}
		all.WriteString(s)
	}
	return []byte(all.String())
}

func BenchmarkDecode(b *testing.B) {
	data := realisticInput(b, 10)
	objs, err := Decode(data, "bench.yaml")
	if err != nil {
		b.Fatal(err)
	}
	b.SetBytes(int64(len(data)))
	b.ReportAllocs()
	b.ResetTimer()
	for b.Loop() {
		if _, err := Decode(data, "bench.yaml"); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(len(objs)*b.N)/b.Elapsed().Seconds(), "objects/s")
}

func BenchmarkValidateSet(b *testing.B) {
	objs, err := Decode(realisticInput(b, 10), "bench.yaml")
	if err != nil {
		b.Fatal(err)
	}
	b.ReportAllocs()
	for b.Loop() {
		if errs, _ := ValidateSet(objs); len(errs) > 0 {
			b.Fatal(errs)
		}
	}
}

func BenchmarkEncodeYAML(b *testing.B) {
	objs, err := Decode(realisticInput(b, 10), "bench.yaml")
	if err != nil {
		b.Fatal(err)
	}
	b.ReportAllocs()
	for b.Loop() {
		if _, err := Encode(objs, "yaml"); err != nil {
			b.Fatal(err)
		}
	}
}
