package admin

import (
	"errors"
	"testing"

	"github.com/weft-mesh/weft/sidecar/httpproxy"
)

func TestRetryCollector(t *testing.T) {
	if _, err := NewRetryCollector(nil); !errors.Is(err, ErrConfig) {
		t.Fatalf("nil stats: %v, want ErrConfig", err)
	}
	var s httpproxy.RetryStats
	s.Retries.Add(3)
	s.RetriesRefused.Add(2)
	s.RetriesNoTime.Add(1)
	s.BodyNotBuffered[httpproxy.NotBufferedTooLarge].Add(4)
	s.FallbackAnswered[2].Add(5)
	c, err := NewRetryCollector(&s)
	if err != nil {
		t.Fatal(err)
	}
	got := gather(t, c)
	for name, want := range map[string]float64{
		"weft_sidecar_http_retries_total":                                     3,
		"weft_sidecar_http_retries_refused_total":                             2,
		"weft_sidecar_http_retries_past_timeout_total":                        1,
		"weft_sidecar_http_retry_body_not_kept_total{reason=too-large}":       4,
		"weft_sidecar_http_retry_body_not_kept_total{reason=expect-continue}": 0,
		"weft_sidecar_http_fallback_answers_total{priority=1}":                0,
		"weft_sidecar_http_fallback_answers_total{priority=2}":                5,
		"weft_sidecar_http_fallback_answers_total{priority=8}":                0,
	} {
		if v, ok := got[name]; !ok || v != want {
			t.Errorf("%s = %v (present %v), want %v", name, v, ok, want)
		}
	}
}
