package resource

import "time"

// Complexity bounds. Each one keeps a single object (and the xDS it compiles to)
// small enough that one bad apply cannot stall pilot or a sidecar; each is enforced
// by Decode/Validate and has a test at the bound and one past it.
const (
	// MaxObjectBytes bounds one object: the bytes of its YAML document and of its
	// JSON form (the JSON check also caps YAML alias expansion).
	MaxObjectBytes = 1 << 20
	// MaxInputBytes bounds one Decode input (one file, one request body).
	MaxInputBytes = 32 << 20
	// MaxObjectsPerInput bounds the number of objects in one Decode/DecodePath call.
	MaxObjectsPerInput = 10000
	// MaxNestingDepth bounds JSON/YAML nesting; the deepest valid object is ~8 levels.
	MaxNestingDepth = 32

	MaxNameLength   = 63  // DNS-1123 label
	MaxLabels       = 64  // labels, annotations and every selector map
	MaxListEntries  = 256 // any other list of strings or ports
	MaxRegexBytes   = 256
	MaxServicePorts = 64
	// MaxServiceAddresses bounds Service spec.addresses (and status.addresses).
	MaxServiceAddresses = 8
	// MaxServiceAddressRangeBits is the longest serviceAddressRange prefix:
	// a /30 has two allocatable addresses (network and broadcast are skipped).
	MaxServiceAddressRangeBits = 30
	// MaxImageBytes bounds MeshConfig.sidecar.image.
	MaxImageBytes          = 512
	MaxRouteHosts          = 64
	MaxHTTPRules           = 256
	MaxMatchesPerRule      = 64
	MaxHeadersPerMatch     = 32
	MaxDestinationsPerRule = 64
	MaxFallbacks           = 8
	MaxSubsets             = 64
	MaxAuthzRules          = 64
	MaxRetryAttempts       = 10
	MaxWorkloadWeight      = 128
	MaxReasonBytes         = 1024 // Override.reason

	// MinOutlierDuration is the least outlierDetection duration (interval, ejection
	// times, jitter): Envoy counts them in milliseconds.
	MinOutlierDuration = time.Millisecond
	// MaxStdevFactor bounds outlierDetection.successRate.stdevFactor (Envoy's default
	// is 1.9; beyond a few nothing is ever an outlier).
	MaxStdevFactor = 1000
	// MaxRequestsPerSecond and MaxRateLimitBurst bound localRateLimit; sidecars
	// refuse larger values (xdsresource.MaxRateLimitRPS, MaxRateLimitBurst).
	MaxRequestsPerSecond = 1e9
	MaxRateLimitBurst    = 1 << 30
	// MaxRateLimitFillTime bounds burst / requestsPerSecond, the time an empty
	// bucket takes to fill (burst 0: one second's worth, at least 1); sidecars
	// refuse longer ones (ratelimit.MaxFillTime keeps the bucket in an int64).
	MaxRateLimitFillTime = 365 * 24 * time.Hour

	// MaxOverrideTTL bounds Override.ttl: an emergency rule must expire by itself soon.
	MaxOverrideTTL = time.Hour
	// MaxDuration bounds every duration field; sidecars refuse longer ones, so pilot
	// must too (a push the sidecar would NACK is caught here first).
	MaxDuration = 10 * 365 * 24 * time.Hour
	// MaxCertificateTTL bounds MeshConfig.certificateTTL.
	MaxCertificateTTL = 365 * 24 * time.Hour
	// MinCRLValidity and MaxCRLValidity bound MeshConfig.crlValidity: pilot
	// re-signs at half of it, and a sidecar refuses new handshakes past it plus
	// grace, so a long one delays revocation and a tiny one is a signing loop.
	MinCRLValidity = 2 * time.Second
	MaxCRLValidity = 7 * 24 * time.Hour
)
