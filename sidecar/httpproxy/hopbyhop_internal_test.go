package httpproxy

import (
	"net/http"
	"reflect"
	"testing"
)

func TestStripHopByHop(t *testing.T) {
	for _, tt := range []struct {
		name string
		in   http.Header
		grpc bool
		want http.Header
	}{
		{"nothing to strip", http.Header{"X-A": {"1"}}, false, http.Header{"X-A": {"1"}}},
		{"hop-by-hop fields go", http.Header{"Connection": {"close"}, "Keep-Alive": {"1"}, "Proxy-Connection": {"x"},
			"Upgrade": {"h2c"}, "Transfer-Encoding": {"chunked"}, "X-A": {"1"}}, false, http.Header{"X-A": {"1"}}},
		{"te trailers stays", http.Header{"Te": {"trailers"}}, false, http.Header{"Te": {"trailers"}}},
		{"te other goes", http.Header{"Te": {"gzip"}}, false, http.Header{}},
		{"te trailers among others stays alone", http.Header{"Te": {"gzip", "trailers"}}, false, http.Header{"Te": {"trailers"}}},
		{"gRPC gets te trailers", http.Header{"Content-Type": {"application/grpc"}}, true,
			http.Header{"Content-Type": {"application/grpc"}, "Te": {"trailers"}}},
		{"gRPC with te other", http.Header{"Te": {"gzip"}}, true, http.Header{"Te": {"trailers"}}},
	} {
		stripHopByHop(tt.in, tt.grpc)
		if !reflect.DeepEqual(tt.in, tt.want) {
			t.Errorf("%s: %v, want %v", tt.name, tt.in, tt.want)
		}
		again := tt.in.Clone()
		if stripHopByHop(again, tt.grpc); !reflect.DeepEqual(again, tt.want) {
			t.Errorf("%s: a second strip changed it to %v", tt.name, again)
		}
	}
}
