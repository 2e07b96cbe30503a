package cluster

import (
	"errors"
	"strconv"
	"time"

	"github.com/weft-mesh/weft/sidecar/circuitbreak"
)

// Queue timeout of a pending request (one waiting for an upstream connection or
// stream while maxConnections is reached): past it the request overflows with
// maxConnections, answered at once rather than held until its route timeout.
// The sidecar's --pending-timeout sets it; MaxQueueTimeout bounds it.
const (
	DefaultQueueTimeout = time.Second
	MaxQueueTimeout     = time.Minute
)

// ErrOverflow is what every *OverflowError is (errors.Is): a circuit-breaker limit
// refused a request.
var ErrOverflow = errors.New("upstream overflow")

// OverflowError is a request refused by one of a cluster's circuit-breaker limits.
type OverflowError struct {
	Cluster string
	Limit   circuitbreak.Limit // the API field name the answer's x-weft-overflow carries
	Detail  string             // optional: why, beyond the limit's name
}

func (e *OverflowError) Error() string {
	s := "cluster " + strconv.Quote(e.Cluster) + ": upstream overflow: " + e.Limit.String()
	if e.Detail != "" {
		s += ": " + e.Detail
	}
	return s
}

// Is makes errors.Is(err, ErrOverflow) hold.
func (e *OverflowError) Is(target error) bool { return target == ErrOverflow }

// Overflowed returns the limit that refused, when err is (or wraps) an overflow.
func Overflowed(err error) (circuitbreak.Limit, bool) {
	var oe *OverflowError
	if errors.As(err, &oe) {
		return oe.Limit, true
	}
	return 0, false
}
