package render

import (
	"strings"
	"testing"
	"time"
)

// Every overload flag: its default, its bounds accepted, one past each refused
// with an error naming the flag.
func TestLimitFlagsAtBoundsAndOnePast(t *testing.T) {
	d := DefaultLimits()
	if d.DefaultRouteTimeout != 15*time.Second || d.MemoryLimit != 256<<20 || d.MemoryHighWater != 0.9 {
		t.Fatalf("defaults %+v", d)
	}
	got, err := Parse(base, readFile)
	if err != nil || got.Limits != d {
		t.Fatalf("no flags: %+v %v, want the defaults", got.Limits, err)
	}
	type check func(Limits) bool
	tests := []struct {
		flag, ok, bad string
		want          check
	}{
		{"max-connections", "16777216", "16777217", func(l Limits) bool { return l.MaxConnections == 1<<24 }},
		{"max-connections", "1", "-1", func(l Limits) bool { return l.MaxConnections == 1 }},
		{"max-connections-per-listener", "1", "16777217", func(l Limits) bool { return l.MaxConnectionsPerListener == 1 }},
		{"max-requests-per-listener", "1", "-1", func(l Limits) bool { return l.MaxRequestsPerListener == 1 }},
		{"max-concurrent-streams", "65536", "65537", func(l Limits) bool { return l.MaxConcurrentStreams == 65536 }},
		{"buffer-size", "4KiB", "4095", func(l Limits) bool { return l.BufferSize == 4096 }},
		{"buffer-size", "1MiB", "1048577", func(l Limits) bool { return l.BufferSize == 1<<20 }},
		{"max-header-bytes", "1024", "1023", func(l Limits) bool { return l.MaxHeaderBytes == 1024 }},
		{"max-header-bytes", "1MiB", "1025KiB", func(l Limits) bool { return l.MaxHeaderBytes == 1<<20 }},
		{"max-header-fields", "8", "7", func(l Limits) bool { return l.MaxHeaderFields == 8 }},
		{"max-header-fields", "1024", "1025", func(l Limits) bool { return l.MaxHeaderFields == 1024 }},
		{"h2-stream-buffer", "64KiB", "65535", func(l Limits) bool { return l.H2StreamBuffer == 64<<10 }},
		{"h2-conn-buffer", "16MiB", "16385KiB", func(l Limits) bool { return l.H2ConnBuffer == 16<<20 }},
		{"h2-max-frame-size", "16KiB", "16383", func(l Limits) bool { return l.H2MaxFrameSize == 16<<10 }},
		{"h2-max-frame-size", "16777215", "16MiB", func(l Limits) bool { return l.H2MaxFrameSize == 1<<24-1 }},
		{"read-header-timeout", "1ns", "0s", func(l Limits) bool { return l.ReadHeaderTimeout == 1 }},
		{"idle-timeout", "24h", "24h0m0.000000001s", func(l Limits) bool { return l.IdleTimeout == 24*time.Hour }},
		{"default-route-timeout", "0s", "-1ns", func(l Limits) bool { return l.DefaultRouteTimeout == 0 }},
		{"default-route-timeout", "1s", "fast", func(l Limits) bool { return l.DefaultRouteTimeout == time.Second }},
		{"drain-timeout", "10m", "10m0.000000001s", func(l Limits) bool { return l.DrainTimeout == 10*time.Minute }},
		{"drain-timeout", "1ns", "0s", func(l Limits) bool { return l.DrainTimeout == 1 }},
		{"memory-limit", "16MiB", "16383KiB", func(l Limits) bool { return l.MemoryLimit == 16<<20 }},
		{"memory-limit", "1024GiB", "1025GiB", func(l Limits) bool { return l.MemoryLimit == 1<<40 }},
		{"memory-limit", "268435456", "256MB", func(l Limits) bool { return l.MemoryLimit == 256<<20 }},
		{"max-retry-body", "1KiB", "1023", func(l Limits) bool { return l.MaxRetryBody == 1<<10 }},
		{"max-retry-body", "16MiB", "16385KiB", func(l Limits) bool { return l.MaxRetryBody == 16<<20 }},
		{"pending-timeout", "1m", "1m0.000000001s", func(l Limits) bool { return l.PendingTimeout == time.Minute }},
		{"pending-timeout", "1ns", "0s", func(l Limits) bool { return l.PendingTimeout == 1 }},
		{"crl-grace", "24h", "24h0m0.000000001s", func(l Limits) bool { return l.CRLGrace == 24*time.Hour }},
		{"crl-grace", "1ns", "0s", func(l Limits) bool { return l.CRLGrace == 1 }},
		{"memory-high-water", "0.1", "0.09", func(l Limits) bool { return l.MemoryHighWater == 0.1 }},
		{"memory-high-water", "1", "1.01", func(l Limits) bool { return l.MemoryHighWater == 1 }},
	}
	for _, tc := range tests {
		t.Run(tc.flag+"="+tc.ok, func(t *testing.T) {
			s, err := Parse(with("--"+tc.flag, tc.ok), readFile)
			if err != nil {
				t.Fatalf("--%s %s: %v", tc.flag, tc.ok, err)
			}
			if !tc.want(s.Limits) {
				t.Fatalf("--%s %s: limits %+v", tc.flag, tc.ok, s.Limits)
			}
			_, err = Parse(with("--"+tc.flag, tc.bad), readFile)
			if err == nil || !strings.Contains(err.Error(), tc.flag) {
				t.Fatalf("--%s %s: err %v, want one naming the flag", tc.flag, tc.bad, err)
			}
		})
	}
}

// The bootstrap file takes the same keys; a flag overrides the file's value.
func TestLimitsFromBootstrapFile(t *testing.T) {
	files["limits.yaml"] = files["full.yaml"] + "max-connections: 500\ndefault-route-timeout: 2s\nmemory-limit: 64MiB\nmemory-high-water: 0.8\n"
	defer delete(files, "limits.yaml")
	s, err := Parse([]string{"--bootstrap", "limits.yaml", "--memory-limit", "128MiB"}, readFile)
	if err != nil {
		t.Fatal(err)
	}
	l := s.Limits
	if l.MaxConnections != 500 || l.DefaultRouteTimeout != 2*time.Second || l.MemoryLimit != 128<<20 || l.MemoryHighWater != 0.8 {
		t.Fatalf("limits %+v", l)
	}
}

func TestParseSize(t *testing.T) {
	for in, want := range map[string]int64{"0": 0, "1B": 1, "2KiB": 2048, "3MiB": 3 << 20, "4GiB": 4 << 30} {
		if got, err := ParseSize(in); err != nil || got != want {
			t.Errorf("ParseSize(%q) = %d, %v; want %d", in, got, err, want)
		}
	}
	for _, in := range []string{"", "MiB", "-1", "1.5MiB", "1 MiB", "9999999999GiB", "1kb"} {
		if _, err := ParseSize(in); err == nil {
			t.Errorf("ParseSize(%q) accepted", in)
		}
	}
	if got := FormatSize(16 << 20); got != "16MiB" {
		t.Errorf("FormatSize = %q", got)
	}
}
