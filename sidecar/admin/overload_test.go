package admin

import (
	"errors"
	"testing"

	"github.com/weft-mesh/weft/sidecar/listener"
	"github.com/weft-mesh/weft/sidecar/overload"
)

func TestOverloadCollector(t *testing.T) {
	if _, err := NewOverloadCollector(OverloadConfig{Listeners: []*listener.Server{nil}}); !errors.Is(err, ErrConfig) {
		t.Fatalf("nil listener: %v, want ErrConfig", err)
	}
	shared, err := overload.NewLimit("sidecar", 7)
	if err != nil {
		t.Fatal(err)
	}
	shared.Acquire()
	mem, err := overload.NewMemory(overload.MemoryConfig{Limit: 64 << 20, HighWater: 0.5, Read: func() uint64 { return 40 << 20 }})
	if err != nil {
		t.Fatal(err)
	}
	mem.Shed()
	c, err := NewOverloadCollector(OverloadConfig{Connections: shared, Memory: mem, Limits: map[string]float64{"max_header_bytes": 65536}})
	if err != nil {
		t.Fatal(err)
	}
	got := gather(t, c)
	for name, want := range map[string]float64{
		"weft_sidecar_downstream_connections_sidecar":       1,
		"weft_sidecar_downstream_connections_sidecar_limit": 7,
		"weft_sidecar_limit{limit=max_header_bytes}":        65536,
		"weft_sidecar_memory_used_bytes":                    40 << 20,
		"weft_sidecar_memory_high_water_bytes":              32 << 20,
		"weft_sidecar_memory_limit_bytes":                   64 << 20,
		"weft_sidecar_memory_shed_requests_total":           1,
		"weft_sidecar_memory_shedding":                      1,
	} {
		if v, ok := got[name]; !ok || v != want {
			t.Errorf("%s = %v (present %v), want %v", name, v, ok, want)
		}
	}
}
