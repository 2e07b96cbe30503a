package app

import (
	"context"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"

	"github.com/weft-mesh/weft/bootstrap/render"
	"github.com/weft-mesh/weft/sidecar/cluster"
	"github.com/weft-mesh/weft/sidecar/dataplane"
	"github.com/weft-mesh/weft/sidecar/httpproxy"
	"github.com/weft-mesh/weft/sidecar/listener"
	"github.com/weft-mesh/weft/sidecar/overload"
	"github.com/weft-mesh/weft/tools/testkit"
)

// bootstrap/render may not import the sidecar's packages, so the flags' defaults
// and bounds are its own constants: they must be the packages' own.
func TestFlagDefaultsAndBoundsAreThePackages(t *testing.T) {
	for _, c := range []struct {
		name      string
		flag, pkg int64
	}{
		{"max connections per listener", render.DefaultMaxConnectionsPerListener, listener.DefaultMaxConnections},
		{"max requests per listener", render.DefaultMaxRequestsPerListener, listener.DefaultMaxRequests},
		{"max concurrent streams", render.DefaultMaxConcurrentStreams, httpproxy.DefaultMaxConcurrentStreams},
		{"max concurrent streams bound", render.MaxConcurrentStreams, httpproxy.MaxMaxConcurrentStreams},
		{"buffer size", render.DefaultBufferSize, httpproxy.DefaultBufferSize},
		{"buffer size min", render.MinBufferSize, httpproxy.MinBufferSize},
		{"buffer size max", render.MaxBufferSize, httpproxy.MaxBufferSize},
		{"header bytes", render.DefaultMaxHeaderBytes, httpproxy.DefaultMaxHeaderBytes},
		{"header bytes min", render.MinMaxHeaderBytes, httpproxy.MinMaxHeaderBytes},
		{"header bytes max", render.MaxMaxHeaderBytes, httpproxy.MaxMaxHeaderBytes},
		{"header fields", render.DefaultMaxHeaderFields, httpproxy.DefaultMaxHeaderFields},
		{"header fields min", render.MinMaxHeaderFields, httpproxy.MinMaxHeaderFields},
		{"header fields max", render.MaxMaxHeaderFields, httpproxy.MaxMaxHeaderFields},
		{"h2 stream buffer", render.DefaultH2StreamBuffer, httpproxy.DefaultH2Buffer},
		{"h2 conn buffer", render.DefaultH2ConnBuffer, httpproxy.DefaultH2Buffer},
		{"h2 buffer min", render.MinH2Buffer, httpproxy.MinH2Buffer},
		{"h2 max frame", render.DefaultH2MaxFrameSize, httpproxy.DefaultH2MaxFrameSize},
		{"h2 max frame min", render.MinH2MaxFrameSize, httpproxy.MinH2MaxFrameSize},
		{"h2 max frame max", render.MaxH2MaxFrameSize, httpproxy.MaxH2MaxFrameSize},
		{"h2 buffer max", render.MaxH2Buffer, httpproxy.MaxH2Buffer},
		{"read header timeout", int64(render.DefaultReadHeaderTimeout), int64(httpproxy.DefaultReadHeaderTimeout)},
		{"idle timeout", int64(render.DefaultIdleTimeout), int64(httpproxy.DefaultIdleTimeout)},
		{"route timeout", int64(render.DefaultRouteTimeout), int64(dataplane.DefaultRouteTimeout)},
		{"connection bound", render.MaxConnectionLimit, overload.MaxLimit},
		{"drain timeout", int64(render.DefaultDrainTimeout), int64(listener.DefaultDrainTimeout)},
		{"drain timeout max", int64(render.MaxDrainTimeout), int64(listener.MaxDrainTimeout)},
		{"memory limit min", render.MinMemoryLimit, overload.MinMemoryLimit},
		{"retry body", render.DefaultMaxRetryBody, httpproxy.DefaultMaxRetryBodyBytes},
		{"retry body min", render.MinMaxRetryBody, httpproxy.MinMaxRetryBodyBytes},
		{"retry body max", render.MaxMaxRetryBody, httpproxy.MaxMaxRetryBodyBytes},
		{"memory limit max", render.MaxMemoryLimit, overload.MaxMemoryLimit},
		{"pending timeout", int64(render.DefaultPendingTimeout), int64(cluster.DefaultQueueTimeout)},
		{"pending timeout max", int64(render.MaxPendingTimeout), int64(cluster.MaxQueueTimeout)},
	} {
		if c.flag != c.pkg {
			t.Errorf("%s: flag %d, package %d", c.name, c.flag, c.pkg)
		}
	}
	if render.MinMemoryHighWater != overload.MinHighWater || render.MaxMemoryHighWater != overload.MaxHighWater {
		t.Error("memory high-water bounds differ")
	}
}

// /metrics shows every bound, its use and its refusals, with the flags' values.
func TestMetricsShowOverloadBounds(t *testing.T) {
	s := settings(t, "127.77.9.6", "--max-connections", "77", "--max-requests-per-listener", "55", "--memory-limit", "200MiB",
		"--memory-high-water", "0.8", "--default-route-timeout", "3s")
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- Run(ctx, s, Options{Logger: hclog.NewNullLogger()}) }()
	defer func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Run = %v", err)
		}
	}()
	hc := &http.Client{Timeout: 2 * time.Second, Transport: &http.Transport{DisableKeepAlives: true}}
	var body string
	testkit.Eventually(t, 10*time.Second, "admin /metrics", func() bool {
		resp, err := hc.Get("http://" + s.AdminAddr.String() + "/metrics")
		if err != nil {
			return false
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		body = string(b)
		return resp.StatusCode == 200
	})
	for _, line := range []string{
		`weft_sidecar_downstream_connections_sidecar_limit 77`,
		`weft_sidecar_downstream_connections_limit{listener="outbound"} 10000`,
		`weft_sidecar_downstream_connections{listener="inbound"} 0`,
		`weft_sidecar_downstream_connections_refused_total{listener="outbound",reason="sidecar_max_connections"} 0`,
		`weft_sidecar_downstream_connections_refused_total{listener="outbound",reason="listener_max_connections"} 0`,
		`weft_sidecar_downstream_requests_limit{listener="inbound"} 55`,
		`weft_sidecar_downstream_requests_active{listener="outbound"} 0`,
		`weft_sidecar_downstream_requests_refused_total{listener="outbound"} 0`,
		`weft_sidecar_memory_limit_bytes 2.097152e+08`,
		`weft_sidecar_memory_high_water_bytes 1.6777216e+08`,
		`weft_sidecar_memory_shed_requests_total 0`,
		`weft_sidecar_memory_shedding 0`,
		`weft_sidecar_limit{limit="default_route_timeout_seconds"} 3`,
		`weft_sidecar_limit{limit="h2_max_concurrent_streams"} 250`,
		`weft_sidecar_limit{limit="max_header_bytes"} 65536`,
		`weft_sidecar_memory_used_bytes `,
		`go_goroutines `,
		`process_open_fds `,
	} {
		if !strings.Contains(body, line) {
			t.Errorf("/metrics lacks %q", line)
		}
	}
	if t.Failed() {
		t.Logf("/metrics:\n%s", body)
	}
}

// A container limit below --memory-limit lowers the ceiling to 90% of it.
func TestMemoryCeilingFollowsCgroup(t *testing.T) {
	for _, tc := range []struct{ flag, cgroup, want int64 }{
		{256 << 20, 0, 256 << 20},
		{256 << 20, 1 << 30, 256 << 20},
		{256 << 20, 200 << 20, 180 << 20},
		{256 << 20, 1 << 20, overload.MinMemoryLimit},
	} {
		if got := memoryCeiling(tc.flag, tc.cgroup); got != tc.want {
			t.Errorf("memoryCeiling(%d, %d) = %d, want %d", tc.flag, tc.cgroup, got, tc.want)
		}
	}
	s := settings(t, "127.77.9.7")
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		done <- Run(ctx, s, Options{Logger: hclog.NewNullLogger(), cgroupMemory: func() int64 { return 100 << 20 }})
	}()
	defer func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Run = %v", err)
		}
	}()
	hc := &http.Client{Timeout: 2 * time.Second, Transport: &http.Transport{DisableKeepAlives: true}}
	want := "weft_sidecar_memory_limit_bytes 9.437184e+07" // 90% of 100 MiB
	testkit.Eventually(t, 10*time.Second, want, func() bool {
		resp, err := hc.Get("http://" + s.AdminAddr.String() + "/metrics")
		if err != nil {
			return false
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return strings.Contains(string(b), want)
	})
}
