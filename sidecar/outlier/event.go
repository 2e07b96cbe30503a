package outlier

import (
	"fmt"
	"strconv"
	"time"
)

// Kind is a detector. Its String is the API's field name (outlierDetection.*), so
// logs, /metrics and /outliers speak the words a policy is written in.
type Kind uint8

// Detectors, Envoy's OutlierEjectionType without the extension monitors.
const (
	KindNone Kind = iota
	KindConsecutive5xx
	KindConsecutiveGatewayFailure
	KindConsecutiveLocalOriginFailure
	KindSuccessRate
	KindSuccessRateLocalOrigin
	KindFailurePercentage
	KindFailurePercentageLocalOrigin
	NumKinds
)

var kindNames = [NumKinds]string{"none", "consecutive5xx", "consecutiveGatewayErrors", "consecutiveLocalOriginFailures",
	"successRate", "successRateLocalOrigin", "failurePercentage", "failurePercentageLocalOrigin"}

func (k Kind) String() string {
	if k < NumKinds {
		return kindNames[k]
	}
	return "Kind(" + strconv.Itoa(int(k)) + ")"
}

// Kinds lists every detector (not KindNone), in order.
func Kinds() []Kind {
	return []Kind{KindConsecutive5xx, KindConsecutiveGatewayFailure, KindConsecutiveLocalOriginFailure,
		KindSuccessRate, KindSuccessRateLocalOrigin, KindFailurePercentage, KindFailurePercentageLocalOrigin}
}

// Action is what an Event did to its host.
type Action uint8

// Actions.
const (
	Eject Action = iota + 1
	Return
)

func (a Action) String() string {
	switch a {
	case Eject:
		return "eject"
	case Return:
		return "return"
	}
	return "Action(" + strconv.Itoa(int(a)) + ")"
}

// Reasons a host returns before its time is served (Event.Reason).
const (
	ReasonServed   = ""                   // its ejection time passed
	ReasonDisabled = "detection disabled" // the policy no longer has outlier detection
	ReasonRemoved  = "host removed"       // no endpoint of the configuration uses it
	// ReasonCapped: the host count or maxEjectionPercent shrank so that more hosts
	// were out than the percent allows; those due back soonest return first.
	ReasonCapped = "maxEjectionPercent"
)

// Numbers are what tripped a detector. Consecutive detectors set Consecutive and
// Threshold; success rate sets Rate (the host's success %), Mean, Stdev, Threshold
// (mean − stdev × factor) and Volume; failure percentage sets Rate (the host's
// failure %), Threshold and Volume.
type Numbers struct {
	Consecutive uint32  `json:"consecutive,omitempty"`
	Volume      uint64  `json:"volume,omitempty"` // requests in the interval
	Rate        float64 `json:"rate,omitempty"`
	Mean        float64 `json:"mean,omitempty"`
	Stdev       float64 `json:"stdev,omitempty"`
	Threshold   float64 `json:"threshold"`
}

// Describe says the numbers in words for k: "5 consecutive (threshold 5)",
// "success rate 60.0% < threshold 72.4% (mean 94.0%, stdev 11.6, 200 requests)".
func (n Numbers) Describe(k Kind) string {
	switch k {
	case KindConsecutive5xx, KindConsecutiveGatewayFailure, KindConsecutiveLocalOriginFailure:
		return fmt.Sprintf("%d consecutive (threshold %g)", n.Consecutive, n.Threshold)
	case KindSuccessRate, KindSuccessRateLocalOrigin:
		return fmt.Sprintf("success rate %.1f%% < threshold %.1f%% (mean %.1f%%, stdev %.1f, %d requests)", n.Rate, n.Threshold, n.Mean, n.Stdev, n.Volume)
	case KindFailurePercentage, KindFailurePercentageLocalOrigin:
		return fmt.Sprintf("failure %.1f%% >= threshold %g%% (%d requests)", n.Rate, n.Threshold, n.Volume)
	}
	return ""
}

// Event is one ejection or return. The detector returns events from its calls
// (Trip, Tick); the caller logs and counts them outside any lock.
type Event struct {
	Service  string    // the Detector's key
	Host     string    // "ip:port"
	Action   Action    //
	Detector Kind      // Eject: what tripped; Return: what had ejected it
	Numbers  Numbers   // what tripped it (Return: the ejection's)
	At       time.Time // when
	// Duration: for Eject the ejection time (base × Multiplier capped, plus
	// jitter); for Return how long the host was out.
	Duration   time.Duration
	Multiplier uint32 // ejections in a row (Envoy's backoff), after this ejection
	Reason     string // Return only: ReasonServed or why earlier
}

// Ejection is a currently ejected host, for /outliers and the report to pilot.
type Ejection struct {
	Service    string        `json:"service"`
	Host       string        `json:"host"`
	Detector   Kind          `json:"-"`
	Numbers    Numbers       `json:"numbers"`
	Since      time.Time     `json:"since"`
	Until      time.Time     `json:"until"`
	Duration   time.Duration `json:"-"`
	Multiplier uint32        `json:"multiplier"`
	Ejections  uint64        `json:"ejections"` // times this host was ever ejected
}

// KindStats count one detector's verdicts.
type KindStats struct {
	Detected    uint64 // outliers found (whether ejected or not)
	Ejected     uint64 // ejections enforced
	NotEnforced uint64 // found, but the enforcing percent's draw said no
	Overflow    uint64 // found, but maxEjectionPercent was reached
}

// Stats are a Detector's counters, monotonic over its life.
type Stats struct {
	ByKind        [NumKinds]KindStats
	Returns       uint64
	PanicPicks    uint64 // picks that ignored ejections (panic mode)
	DroppedEvents uint64 // return events over MaxPendingEvents (the returns happened)
}
