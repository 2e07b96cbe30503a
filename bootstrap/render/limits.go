package render

import (
	"errors"
	"flag"
	"fmt"
	"math"
	"strconv"
	"strings"
	"time"
)

// Defaults of the sidecar's overload bounds (issue #7). Each is a flag (and a
// bootstrap file key of the same name). The sidecar's packages have the same
// defaults for their zero values; sidecar/app tests that the two agree.
const (
	DefaultMaxConnections            = 10000 // whole sidecar: HTTP/1.1, HTTP/2 and TCP downstream connections
	DefaultMaxConnectionsPerListener = 10000
	DefaultMaxRequestsPerListener    = 10000 // HTTP/1.1 requests and HTTP/2 streams in flight
	DefaultMaxConcurrentStreams      = 250   // per HTTP/2 client connection (Go's default)
	DefaultBufferSize                = 16 << 10
	DefaultMaxHeaderBytes            = 64 << 10
	DefaultMaxHeaderFields           = 128
	DefaultH2StreamBuffer            = 1 << 20
	DefaultH2ConnBuffer              = 1 << 20
	DefaultH2MaxFrameSize            = 16 << 10 // HTTP/2's initial value
	DefaultReadHeaderTimeout         = 30 * time.Second
	DefaultIdleTimeout               = 5 * time.Minute
	DefaultRouteTimeout              = 15 * time.Second // Envoy's
	DefaultDrainTimeout              = 5 * time.Second  // Istio's termination drain duration
	DefaultMemoryLimit               = 256 << 20
	DefaultMemoryHighWater           = 0.9
	// DefaultMaxRetryBody is the longest request body kept for replay by
	// retries and fallbacks (issue #8); a longer one is sent once.
	DefaultMaxRetryBody = 64 << 10
	// DefaultPendingTimeout is the longest a request waits as pending for an
	// upstream connection (maxPendingRequests' queue) before it overflows with
	// maxConnections.
	DefaultPendingTimeout = time.Second
	// DefaultCRLGrace is how long past its NextUpdate the sidecar still uses a
	// CRL (revoke.DefaultGrace); after it, new mTLS handshakes are refused.
	DefaultCRLGrace = time.Hour
)

// Bounds of the overload flags (the packages that apply them check the same).
const (
	MaxConnectionLimit   = 1 << 24
	MinBufferSize        = 4 << 10
	MaxBufferSize        = 1 << 20
	MinMaxHeaderBytes    = 1 << 10
	MaxMaxHeaderBytes    = 1 << 20
	MinMaxHeaderFields   = 8
	MaxMaxHeaderFields   = 1024
	MaxConcurrentStreams = 1 << 16
	MinH2Buffer          = 64 << 10
	MaxH2Buffer          = 16 << 20
	MinH2MaxFrameSize    = 16 << 10
	MaxH2MaxFrameSize    = 1<<24 - 1
	MaxTimeout           = 24 * time.Hour
	MaxDrainTimeout      = 10 * time.Minute
	MinMemoryLimit       = 16 << 20
	MaxMemoryLimit       = 1 << 40
	MinMemoryHighWater   = 0.1
	MaxMemoryHighWater   = 1.0
	MinMaxRetryBody      = 1 << 10
	MaxMaxRetryBody      = 16 << 20
	MaxPendingTimeout    = time.Minute
	MaxCRLGrace          = 24 * time.Hour // sidecar/mtls.MaxCRLGrace
)

// Limits are the sidecar's own overload bounds, validated, defaults applied.
type Limits struct {
	MaxConnections            int // whole sidecar
	MaxConnectionsPerListener int
	MaxRequestsPerListener    int
	MaxConcurrentStreams      int
	BufferSize                int
	MaxHeaderBytes            int
	MaxHeaderFields           int
	H2StreamBuffer            int
	H2ConnBuffer              int
	H2MaxFrameSize            int
	ReadHeaderTimeout         time.Duration
	IdleTimeout               time.Duration
	// DefaultRouteTimeout bounds requests on routes that set no timeout; 0
	// disables it.
	DefaultRouteTimeout time.Duration
	// DrainTimeout is how long shutdown lets HTTP/2 streams finish after GOAWAY.
	DrainTimeout    time.Duration
	MemoryLimit     int64   // bytes: the Go soft limit and the shedding base
	MemoryHighWater float64 // fraction of MemoryLimit at which new requests are shed
	// MaxRetryBody bounds the request body kept for replay by retries and
	// fallbacks (bytes).
	MaxRetryBody int
	// PendingTimeout bounds a pending request's wait for an upstream connection.
	PendingTimeout time.Duration
	// CRLGrace is how long past NextUpdate a CRL is still used (mTLS).
	CRLGrace time.Duration
}

// DefaultLimits are the bounds with no flag given.
func DefaultLimits() Limits {
	return Limits{MaxConnections: DefaultMaxConnections, MaxConnectionsPerListener: DefaultMaxConnectionsPerListener,
		MaxRequestsPerListener: DefaultMaxRequestsPerListener, MaxConcurrentStreams: DefaultMaxConcurrentStreams,
		BufferSize: DefaultBufferSize, MaxHeaderBytes: DefaultMaxHeaderBytes, MaxHeaderFields: DefaultMaxHeaderFields,
		H2StreamBuffer: DefaultH2StreamBuffer, H2ConnBuffer: DefaultH2ConnBuffer, H2MaxFrameSize: DefaultH2MaxFrameSize,
		ReadHeaderTimeout: DefaultReadHeaderTimeout, IdleTimeout: DefaultIdleTimeout, DefaultRouteTimeout: DefaultRouteTimeout,
		DrainTimeout: DefaultDrainTimeout,
		MemoryLimit:  DefaultMemoryLimit, MemoryHighWater: DefaultMemoryHighWater, MaxRetryBody: DefaultMaxRetryBody,
		PendingTimeout: DefaultPendingTimeout, CRLGrace: DefaultCRLGrace}
}

// FileLimits are the overload keys of the bootstrap file (and the flags' raw
// values): counts are numbers, durations Go durations ("15s"), sizes bytes with
// an optional KiB/MiB/GiB suffix ("256MiB"). Unset (zero) means the default.
type FileLimits struct {
	MaxConnections            int     `json:"max-connections,omitempty"`
	MaxConnectionsPerListener int     `json:"max-connections-per-listener,omitempty"`
	MaxRequestsPerListener    int     `json:"max-requests-per-listener,omitempty"`
	MaxConcurrentStreams      int     `json:"max-concurrent-streams,omitempty"`
	BufferSize                string  `json:"buffer-size,omitempty"`
	MaxHeaderBytes            string  `json:"max-header-bytes,omitempty"`
	MaxHeaderFields           int     `json:"max-header-fields,omitempty"`
	H2StreamBuffer            string  `json:"h2-stream-buffer,omitempty"`
	H2ConnBuffer              string  `json:"h2-conn-buffer,omitempty"`
	H2MaxFrameSize            string  `json:"h2-max-frame-size,omitempty"`
	ReadHeaderTimeout         string  `json:"read-header-timeout,omitempty"`
	IdleTimeout               string  `json:"idle-timeout,omitempty"`
	DefaultRouteTimeout       string  `json:"default-route-timeout,omitempty"`
	DrainTimeout              string  `json:"drain-timeout,omitempty"`
	MemoryLimit               string  `json:"memory-limit,omitempty"`
	MemoryHighWater           float64 `json:"memory-high-water,omitempty"`
	MaxRetryBody              string  `json:"max-retry-body,omitempty"`
	PendingTimeout            string  `json:"pending-timeout,omitempty"`
	CRLGrace                  string  `json:"crl-grace,omitempty"`
}

// limitFlags registers the overload flags on fs, writing into l.
func limitFlags(fs *flag.FlagSet, l *FileLimits) {
	fs.IntVar(&l.MaxConnections, "max-connections", 0, fmt.Sprintf("downstream connections across all listeners (default %d)", DefaultMaxConnections))
	fs.IntVar(&l.MaxConnectionsPerListener, "max-connections-per-listener", 0, fmt.Sprintf("downstream connections per listener (default %d)", DefaultMaxConnectionsPerListener))
	fs.IntVar(&l.MaxRequestsPerListener, "max-requests-per-listener", 0, fmt.Sprintf("HTTP requests and HTTP/2 streams in flight per listener (default %d)", DefaultMaxRequestsPerListener))
	fs.IntVar(&l.MaxConcurrentStreams, "max-concurrent-streams", 0, fmt.Sprintf("HTTP/2 streams per client connection (default %d)", DefaultMaxConcurrentStreams))
	fs.StringVar(&l.BufferSize, "buffer-size", "", "per-connection HTTP/1.1 read and write buffer, also the longest request line (default 16KiB)")
	fs.StringVar(&l.MaxHeaderBytes, "max-header-bytes", "", "largest header section of a request or response (default 64KiB)")
	fs.IntVar(&l.MaxHeaderFields, "max-header-fields", 0, fmt.Sprintf("header lines per message (default %d)", DefaultMaxHeaderFields))
	fs.StringVar(&l.H2StreamBuffer, "h2-stream-buffer", "", "request body bytes buffered per HTTP/2 stream (default 1MiB)")
	fs.StringVar(&l.H2ConnBuffer, "h2-conn-buffer", "", "request body bytes buffered per HTTP/2 connection (default 1MiB)")
	fs.StringVar(&l.H2MaxFrameSize, "h2-max-frame-size", "", "largest HTTP/2 frame a client may send; each connection keeps a read buffer this big (default 16KiB)")
	fs.StringVar(&l.ReadHeaderTimeout, "read-header-timeout", "", "time to read a request's header section (default 30s)")
	fs.StringVar(&l.IdleTimeout, "idle-timeout", "", "close a client connection idle this long (default 5m)")
	fs.StringVar(&l.DefaultRouteTimeout, "default-route-timeout", "", "timeout of routes that set none; 0s disables (default 15s, Envoy's)")
	fs.StringVar(&l.DrainTimeout, "drain-timeout", "", "on shutdown, time HTTP/2 streams get to finish after GOAWAY before connections are closed (default 5s)")
	fs.StringVar(&l.MemoryLimit, "memory-limit", "", "memory ceiling: the Go soft limit and the base of --memory-high-water (default 256MiB)")
	fs.StringVar(&l.CRLGrace, "crl-grace", "", "how long past its NextUpdate the revocation list is still used; after it new mTLS handshakes are refused (default 1h, at most 24h)")
	fs.StringVar(&l.PendingTimeout, "pending-timeout", "", "longest a request waits for an upstream connection when a Service's maxConnections is reached (one of its maxPendingRequests) before a 503 maxConnections overflow (default 1s)")
	fs.StringVar(&l.MaxRetryBody, "max-retry-body", "", "longest request body kept for replay by retries and fallbacks; a longer one is sent once, not retried (default 64KiB)")
	fs.Float64Var(&l.MemoryHighWater, "memory-high-water", 0, fmt.Sprintf("fraction of --memory-limit at which new requests are shed with 503 (default %v)", DefaultMemoryHighWater))
}

// override applies the explicitly set overload flags of cmd to l.
func (l *FileLimits) override(cmd FileLimits, set map[string]bool) {
	ints := map[string][2]*int{
		"max-connections": {&l.MaxConnections, &cmd.MaxConnections}, "max-connections-per-listener": {&l.MaxConnectionsPerListener, &cmd.MaxConnectionsPerListener},
		"max-requests-per-listener": {&l.MaxRequestsPerListener, &cmd.MaxRequestsPerListener}, "max-concurrent-streams": {&l.MaxConcurrentStreams, &cmd.MaxConcurrentStreams},
		"max-header-fields": {&l.MaxHeaderFields, &cmd.MaxHeaderFields},
	}
	for name, v := range ints {
		if set[name] {
			*v[0] = *v[1]
		}
	}
	strs := map[string][2]*string{
		"buffer-size": {&l.BufferSize, &cmd.BufferSize}, "max-header-bytes": {&l.MaxHeaderBytes, &cmd.MaxHeaderBytes},
		"h2-stream-buffer": {&l.H2StreamBuffer, &cmd.H2StreamBuffer}, "h2-conn-buffer": {&l.H2ConnBuffer, &cmd.H2ConnBuffer},
		"h2-max-frame-size":   {&l.H2MaxFrameSize, &cmd.H2MaxFrameSize},
		"read-header-timeout": {&l.ReadHeaderTimeout, &cmd.ReadHeaderTimeout}, "idle-timeout": {&l.IdleTimeout, &cmd.IdleTimeout},
		"default-route-timeout": {&l.DefaultRouteTimeout, &cmd.DefaultRouteTimeout}, "memory-limit": {&l.MemoryLimit, &cmd.MemoryLimit},
		"drain-timeout": {&l.DrainTimeout, &cmd.DrainTimeout}, "max-retry-body": {&l.MaxRetryBody, &cmd.MaxRetryBody},
		"pending-timeout": {&l.PendingTimeout, &cmd.PendingTimeout}, "crl-grace": {&l.CRLGrace, &cmd.CRLGrace},
	}
	for name, v := range strs {
		if set[name] {
			*v[0] = *v[1]
		}
	}
	if set["memory-high-water"] {
		l.MemoryHighWater = cmd.MemoryHighWater
	}
}

// Limits validates the raw values; every error names the flag and its bounds.
func (l FileLimits) Limits() (Limits, error) {
	out := DefaultLimits()
	count := func(name string, v int, lo, hi int, dst *int) error {
		if v == 0 {
			return nil
		}
		if v < lo || v > hi {
			return fmt.Errorf("%s: %d outside %d..%d", name, v, lo, hi)
		}
		*dst = v
		return nil
	}
	size := func(name, v string, lo, hi int64, set func(int64)) error {
		if v == "" {
			return nil
		}
		n, err := ParseSize(v)
		if err != nil {
			return fmt.Errorf("%s: %v", name, err)
		}
		if n < lo || n > hi {
			return fmt.Errorf("%s: %s outside %s..%s", name, v, FormatSize(lo), FormatSize(hi))
		}
		set(n)
		return nil
	}
	toInt := func(dst *int) func(int64) { return func(n int64) { *dst = int(n) } }
	dur := func(name, v string, allowZero bool, limit time.Duration, dst *time.Duration) error {
		if v == "" {
			return nil
		}
		d, err := time.ParseDuration(v)
		if err != nil {
			return fmt.Errorf("%s: %q is not a duration (like 15s)", name, v)
		}
		if d < 0 || (d == 0 && !allowZero) || d > limit {
			lo := "1ns"
			if allowZero {
				lo = "0s"
			}
			return fmt.Errorf("%s: %s outside %s..%s", name, v, lo, limit)
		}
		*dst = d
		return nil
	}
	errs := []error{
		count("max-connections", l.MaxConnections, 1, MaxConnectionLimit, &out.MaxConnections),
		count("max-connections-per-listener", l.MaxConnectionsPerListener, 1, MaxConnectionLimit, &out.MaxConnectionsPerListener),
		count("max-requests-per-listener", l.MaxRequestsPerListener, 1, MaxConnectionLimit, &out.MaxRequestsPerListener),
		count("max-concurrent-streams", l.MaxConcurrentStreams, 1, MaxConcurrentStreams, &out.MaxConcurrentStreams),
		size("buffer-size", l.BufferSize, MinBufferSize, MaxBufferSize, toInt(&out.BufferSize)),
		size("max-header-bytes", l.MaxHeaderBytes, MinMaxHeaderBytes, MaxMaxHeaderBytes, toInt(&out.MaxHeaderBytes)),
		count("max-header-fields", l.MaxHeaderFields, MinMaxHeaderFields, MaxMaxHeaderFields, &out.MaxHeaderFields),
		size("h2-stream-buffer", l.H2StreamBuffer, MinH2Buffer, MaxH2Buffer, toInt(&out.H2StreamBuffer)),
		size("h2-conn-buffer", l.H2ConnBuffer, MinH2Buffer, MaxH2Buffer, toInt(&out.H2ConnBuffer)),
		size("h2-max-frame-size", l.H2MaxFrameSize, MinH2MaxFrameSize, MaxH2MaxFrameSize, toInt(&out.H2MaxFrameSize)),
		dur("read-header-timeout", l.ReadHeaderTimeout, false, MaxTimeout, &out.ReadHeaderTimeout),
		dur("idle-timeout", l.IdleTimeout, false, MaxTimeout, &out.IdleTimeout),
		dur("default-route-timeout", l.DefaultRouteTimeout, true, MaxTimeout, &out.DefaultRouteTimeout),
		dur("drain-timeout", l.DrainTimeout, false, MaxDrainTimeout, &out.DrainTimeout),
		size("memory-limit", l.MemoryLimit, MinMemoryLimit, MaxMemoryLimit, func(n int64) { out.MemoryLimit = n }),
		size("max-retry-body", l.MaxRetryBody, MinMaxRetryBody, MaxMaxRetryBody, toInt(&out.MaxRetryBody)),
		dur("pending-timeout", l.PendingTimeout, false, MaxPendingTimeout, &out.PendingTimeout),
		dur("crl-grace", l.CRLGrace, false, MaxCRLGrace, &out.CRLGrace),
	}
	if err := errors.Join(errs...); err != nil {
		return Limits{}, err
	}
	if hw := l.MemoryHighWater; hw != 0 {
		if !(hw >= MinMemoryHighWater && hw <= MaxMemoryHighWater) { // also NaN
			return Limits{}, fmt.Errorf("memory-high-water: %v outside %v..%v", hw, MinMemoryHighWater, MaxMemoryHighWater)
		}
		out.MemoryHighWater = hw
	}
	return out, nil
}

// ParseSize parses a byte count: digits with an optional suffix B, KiB, MiB or
// GiB (powers of 1024).
func ParseSize(s string) (int64, error) {
	num, mult := s, int64(1)
	for _, u := range []struct {
		suffix string
		mult   int64
	}{{"GiB", 1 << 30}, {"MiB", 1 << 20}, {"KiB", 1 << 10}, {"B", 1}} {
		if n, ok := strings.CutSuffix(s, u.suffix); ok {
			num, mult = n, u.mult
			break
		}
	}
	n, err := strconv.ParseInt(num, 10, 64)
	if err != nil || n < 0 || n > math.MaxInt64/mult {
		return 0, fmt.Errorf("%q is not a size (bytes, or a number with KiB, MiB or GiB)", s)
	}
	return n * mult, nil
}

// FormatSize writes n with the largest binary suffix that divides it.
func FormatSize(n int64) string {
	for _, u := range []struct {
		suffix string
		mult   int64
	}{{"GiB", 1 << 30}, {"MiB", 1 << 20}, {"KiB", 1 << 10}} {
		if n != 0 && n%u.mult == 0 {
			return strconv.FormatInt(n/u.mult, 10) + u.suffix
		}
	}
	return strconv.FormatInt(n, 10) + "B"
}
