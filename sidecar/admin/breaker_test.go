package admin

import (
	"errors"
	"testing"

	"github.com/weft-mesh/weft/sidecar/circuitbreak"
	"github.com/weft-mesh/weft/sidecar/cluster"
)

func TestBreakerCollector(t *testing.T) {
	if _, err := NewBreakerCollector(nil); !errors.Is(err, ErrConfig) {
		t.Fatalf("nil registry: %v, want ErrConfig", err)
	}
	reg := cluster.NewRegistry()
	const key = "outbound|9080||reviews.shop.svc.cluster.local"
	b := reg.Shared(key).Breaker
	if err := b.SetLimits(circuitbreak.Limits{MaxConnections: 2, MaxPendingRequests: 1, MaxRequests: 10, MaxRetries: 5,
		Budget: &circuitbreak.Budget{Percent: 20, MinConcurrency: 1}}); err != nil {
		t.Fatal(err)
	}
	for range 3 {
		b.Acquire(circuitbreak.Connections) // two in use, one overflow
	}
	for range 10 {
		b.Acquire(circuitbreak.Requests)
	}
	b.Acquire(circuitbreak.Retries)
	b.Acquire(circuitbreak.Retries) // budget: 20% of 10 = 2, one in use: admitted
	b.Acquire(circuitbreak.Retries) // refused by the budget
	reg.Shared("inbound|80||")
	c, err := NewBreakerCollector(reg)
	if err != nil {
		t.Fatal(err)
	}
	got := gather(t, c)
	svc := "{service=" + key + "}" // labels come sorted: limit, then service
	for name, want := range map[string]float64{
		"weft_sidecar_breaker_overflows_total{limit=maxConnections}" + svc:     1,
		"weft_sidecar_breaker_overflows_total{limit=maxPendingRequests}" + svc: 0,
		"weft_sidecar_breaker_overflows_total{limit=maxRetries}" + svc:         0,
		"weft_sidecar_breaker_overflows_total{limit=retryBudget}" + svc:        1,
		"weft_sidecar_breaker_in_use{limit=maxConnections}" + svc:              2,
		"weft_sidecar_breaker_in_use{limit=maxRequests}" + svc:                 10,
		"weft_sidecar_breaker_in_use{limit=maxRetries}" + svc:                  2,
		"weft_sidecar_breaker_limit{limit=maxConnections}" + svc:               2,
		"weft_sidecar_breaker_limit{limit=maxRetries}" + svc:                   2, // the budget's allowance, below 5
		"weft_sidecar_breaker_limit{limit=maxRequests}{service=inbound|80||}":  1024,
	} {
		if v, ok := got[name]; !ok || v != want {
			t.Errorf("%s = %v (present %v), want %v", name, v, ok, want)
		}
	}
	if n := len(got); n != 2*(5+4+4) {
		t.Errorf("%d series, want %d (13 per service)", n, 2*13)
	}
}
