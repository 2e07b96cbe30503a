// Package outlierreport is the wire shared by pilot and the sidecar for outlier
// ejection summaries: a sidecar tells pilot which hosts it ejects right now, and
// pilot aggregates the reports per endpoint ("40 of 50 clients eject
// 10.0.0.3:9080").
//
// A report is a compact binary encoding (codec.go) carried in a
// google.protobuf.BytesValue by one unary gRPC method served on pilot's xDS port
// beside ADS (grpc.go). Every size is bounded by an exported constant, decoding
// is strict (one canonical encoding per report), and a report past any bound is
// refused whole.
//
// Reports are feedback, never control: pilot only displays them, and a sidecar
// drops a report rather than wait for pilot (seed 000, "Data-plane feedback must
// also degrade safely").
package outlierreport

import (
	"errors"
	"fmt"
	"net"
	"strconv"
	"time"
	"unicode"
	"unicode/utf8"
)

// Bounds of one report. Encode and Decode refuse anything past them.
const (
	// MaxEntries is the most ejections one report lists. A sidecar with more
	// lists the first MaxEntries (Fit) and says how many it has in Total.
	MaxEntries = 256
	// MaxReportBytes bounds one encoded report.
	MaxReportBytes = 32 << 10
	// MaxNodeBytes bounds the node id.
	MaxNodeBytes = 256
	// MaxServiceBytes bounds a service key (a cluster name without its subset).
	MaxServiceBytes = 512
	// MaxEndpointBytes bounds an endpoint's host:port.
	MaxEndpointBytes = 128
	// MaxTotal bounds Report.Total (the ejections a sidecar holds, listed or not).
	MaxTotal = 1 << 20
	// MaxAge bounds how long ago an ejection started.
	MaxAge = 30 * 24 * time.Hour
	// MaxTimes bounds Entry.Times.
	MaxTimes = 1 << 20
)

// Rate of reports. The sidecar sends when its ejections change, at most once per
// MinSendInterval, and at least every RefreshInterval (an unchanged report too,
// so pilot knows it is alive and its entries current). Pilot keeps a report for
// TTL after it arrived and accepts at most MaxReportsPerWindow per node per
// RateWindow: a sidecar that follows MinSendInterval never reaches it.
const (
	MinSendInterval     = 2 * time.Second
	RefreshInterval     = 30 * time.Second
	TTL                 = 3 * RefreshInterval
	RateWindow          = 10 * time.Second
	MaxReportsPerWindow = 10
)

// Detector names the outlier detector that ejected a host (Envoy's ejection
// types). The String form is the API's field name (outlierDetection.*), as
// sidecar/outlier.Kind's.
type Detector uint8

// Detectors. Zero is invalid on the wire.
const (
	Consecutive5xx Detector = 1 + iota
	ConsecutiveGatewayErrors
	ConsecutiveLocalOriginFailures
	SuccessRate
	SuccessRateLocalOrigin
	FailurePercentage
	FailurePercentageLocalOrigin
	maxDetector = FailurePercentageLocalOrigin
)

var detectorNames = [...]string{
	Consecutive5xx:                 "consecutive5xx",
	ConsecutiveGatewayErrors:       "consecutiveGatewayErrors",
	ConsecutiveLocalOriginFailures: "consecutiveLocalOriginFailures",
	SuccessRate:                    "successRate",
	SuccessRateLocalOrigin:         "successRateLocalOrigin",
	FailurePercentage:              "failurePercentage",
	FailurePercentageLocalOrigin:   "failurePercentageLocalOrigin",
}

// Valid reports whether d is a known detector.
func (d Detector) Valid() bool { return d >= Consecutive5xx && d <= maxDetector }

func (d Detector) String() string {
	if !d.Valid() {
		return "Detector(" + strconv.Itoa(int(d)) + ")"
	}
	return detectorNames[d]
}

// ParseDetector is the inverse of String.
func ParseDetector(s string) (Detector, error) {
	for d := Consecutive5xx; d <= maxDetector; d++ {
		if detectorNames[d] == s {
			return d, nil
		}
	}
	return 0, fmt.Errorf("detector %q: unknown", s)
}

// Entry is one ejected host as one sidecar sees it.
type Entry struct {
	Service  string        // service key: the cluster name without its subset
	Endpoint string        // host:port
	Detector Detector      // the detector that ejected it
	Age      time.Duration // how long it has been ejected when the report was built (ms precision on the wire)
	Times    uint32        // how many times this host has been ejected (the ejection-time multiplier), >= 1
}

// Report is one sidecar's current ejections. Entries are sorted by (Service,
// Endpoint) with no duplicates; Total >= len(Entries) counts every ejection the
// sidecar holds (more when Fit had to leave some out).
type Report struct {
	Node    string
	Total   uint32
	Entries []Entry
}

// Truncated reports whether the sidecar holds ejections the report leaves out.
func (r *Report) Truncated() bool { return int(r.Total) > len(r.Entries) }

// ErrInvalid wraps every validation and decoding error.
var ErrInvalid = errors.New("invalid outlier report")

func invalid(format string, args ...any) error {
	return fmt.Errorf("%w: "+format, append([]any{ErrInvalid}, args...)...)
}

// Validate checks every bound and the order of the entries.
func (r *Report) Validate() error {
	if err := checkToken("node", r.Node, MaxNodeBytes); err != nil {
		return err
	}
	if len(r.Entries) > MaxEntries {
		return invalid("node %s: entries: %d, at most %d", r.Node, len(r.Entries), MaxEntries)
	}
	if r.Total > MaxTotal {
		return invalid("node %s: total: %d, at most %d", r.Node, r.Total, MaxTotal)
	}
	if int(r.Total) < len(r.Entries) {
		return invalid("node %s: total: %d is less than the %d entries listed", r.Node, r.Total, len(r.Entries))
	}
	for i := range r.Entries {
		e := &r.Entries[i]
		if err := e.validate(); err != nil {
			return fmt.Errorf("node %s: entries[%d]: %w", r.Node, i, err)
		}
		if i > 0 && !less(&r.Entries[i-1], e) {
			return invalid("node %s: entries[%d]: %s %s is not after %s %s (sorted by service, endpoint; no duplicates)",
				r.Node, i, e.Service, e.Endpoint, r.Entries[i-1].Service, r.Entries[i-1].Endpoint)
		}
	}
	return nil
}

func (e *Entry) validate() error {
	if err := checkToken("service", e.Service, MaxServiceBytes); err != nil {
		return err
	}
	if err := checkEndpoint(e.Endpoint); err != nil {
		return err
	}
	if !e.Detector.Valid() {
		return invalid("endpoint %s: detector: %d unknown", e.Endpoint, e.Detector)
	}
	if e.Age < 0 || e.Age > MaxAge {
		return invalid("endpoint %s: age: %v outside [0, %v]", e.Endpoint, e.Age, MaxAge)
	}
	if e.Times < 1 || e.Times > MaxTimes {
		return invalid("endpoint %s: times: %d outside [1, %d]", e.Endpoint, e.Times, MaxTimes)
	}
	return nil
}

func less(a, b *Entry) bool {
	return a.Service < b.Service || a.Service == b.Service && a.Endpoint < b.Endpoint
}

// checkToken: non-empty, at most max bytes, valid UTF-8 without white space or
// control characters (the rule the sidecar's --node-id follows), so what pilot
// shows an operator is exactly what was sent.
func checkToken(field, s string, max int) error {
	if s == "" {
		return invalid("%s: empty", field)
	}
	if len(s) > max {
		return invalid("%s: %d bytes, at most %d", field, len(s), max)
	}
	for i, r := range s {
		if r == utf8.RuneError || r <= ' ' || r == 0x7f || r >= 0x80 && r <= 0x9f || unicode.IsSpace(r) {
			return invalid("%s %q: byte %d is not printable (white space, a control character or invalid UTF-8)", field, s, i)
		}
	}
	return nil
}

func checkEndpoint(s string) error {
	if err := checkToken("endpoint", s, MaxEndpointBytes); err != nil {
		return err
	}
	host, port, err := net.SplitHostPort(s)
	if err != nil {
		return invalid("endpoint %q: want host:port: %v", s, err)
	}
	if host == "" {
		return invalid("endpoint %q: empty host", s)
	}
	if p, err := strconv.ParseUint(port, 10, 16); err != nil || p == 0 || port[0] == '0' || port[0] == '+' {
		return invalid("endpoint %q: port %q: want 1..65535", s, port)
	}
	return nil
}
