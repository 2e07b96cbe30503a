package admin

import (
	"errors"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/weft-mesh/weft/sidecar/cluster"
	"github.com/weft-mesh/weft/sidecar/ratelimit"
)

func TestRateLimitCollector(t *testing.T) {
	if _, err := NewRateLimitCollector(nil); !errors.Is(err, ErrConfig) {
		t.Fatalf("nil registry: %v, want ErrConfig", err)
	}
	reg := cluster.NewRegistry()
	now := time.Unix(1000, 0)
	enforce := reg.Shared("outbound|9080||reviews.shop.svc.cluster.local").Limiter
	if err := enforce.Configure(ratelimit.Config{RequestsPerSecond: 1, Burst: 2}, now); err != nil {
		t.Fatal(err)
	}
	for range 5 {
		enforce.Allow(now) // 2 allowed, 3 rejected
	}
	dry := reg.Shared("inbound|8080||").Limiter
	if err := dry.Configure(ratelimit.Config{RequestsPerSecond: 0.5, DryRun: true}, now); err != nil {
		t.Fatal(err)
	}
	for range 4 {
		dry.Allow(now) // 1 allowed, 3 would-be rejections
	}
	// Off and never used: not exported. Off after use: exported with its counts.
	reg.Shared("outbound|80||free.shop.svc.cluster.local")
	was := reg.Shared("outbound|80||was.shop.svc.cluster.local").Limiter
	if err := was.Configure(ratelimit.Config{RequestsPerSecond: 10}, now); err != nil {
		t.Fatal(err)
	}
	was.Allow(now)
	if err := was.Configure(ratelimit.Config{}, now); err != nil {
		t.Fatal(err)
	}
	c, err := NewRateLimitCollector(reg)
	if err != nil {
		t.Fatal(err)
	}
	got := gather(t, c)
	const (
		rev = "{service=outbound|9080||reviews.shop.svc.cluster.local}"
		in  = "{service=inbound|8080||}"
		off = "{service=outbound|80||was.shop.svc.cluster.local}"
	)
	want := map[string]float64{
		"weft_sidecar_ratelimit_allowed_total" + rev:          2,
		"weft_sidecar_ratelimit_rejected_total" + rev:         3,
		"weft_sidecar_ratelimit_dry_run_rejected_total" + rev: 0,
		"weft_sidecar_ratelimit_requests_per_second" + rev:    1,
		"weft_sidecar_ratelimit_burst" + rev:                  2,
		"weft_sidecar_ratelimit_dry_run" + rev:                0,
		"weft_sidecar_ratelimit_allowed_total" + in:           1,
		"weft_sidecar_ratelimit_rejected_total" + in:          0,
		"weft_sidecar_ratelimit_dry_run_rejected_total" + in:  3,
		"weft_sidecar_ratelimit_requests_per_second" + in:     0.5,
		"weft_sidecar_ratelimit_burst" + in:                   1, // defaulted
		"weft_sidecar_ratelimit_dry_run" + in:                 1,
		"weft_sidecar_ratelimit_allowed_total" + off:          1,
		"weft_sidecar_ratelimit_rejected_total" + off:         0,
		"weft_sidecar_ratelimit_dry_run_rejected_total" + off: 0,
		"weft_sidecar_ratelimit_requests_per_second" + off:    0,
		"weft_sidecar_ratelimit_burst" + off:                  0,
		"weft_sidecar_ratelimit_dry_run" + off:                0,
	}
	if d := cmp.Diff(want, got); d != "" {
		t.Errorf("metrics (-want +got):\n%s", d)
	}
}
