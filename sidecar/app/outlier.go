package app

import (
	"context"
	"math/rand/v2"
	"time"

	"github.com/hashicorp/go-hclog"

	"github.com/weft-mesh/weft/sidecar/cluster"
	"github.com/weft-mesh/weft/sidecar/outlier"
)

// Bounds of the outlier goroutine's schedule.
const (
	// OutlierMinGap is the least time between two passes over the detectors, so
	// a burst of ejections (each wakes the goroutine) costs one pass per gap.
	OutlierMinGap = 10 * time.Millisecond
	// OutlierMaxWait is the longest it sleeps with nothing scheduled: a backstop,
	// since every change that schedules work (activation, ejection) wakes it.
	OutlierMaxWait = 10 * time.Second
)

// runOutliers is the outlier shell: one goroutine that ticks every detector of reg
// when it has work (interval ends, ejections ending) with time.Now(), and logs
// every ejection and return, from the ticks and from the request path, until ctx
// ends. It does not depend on pilot: with the stream down and the endpoints served
// stale, hosts are still ejected and returned.
func runOutliers(ctx context.Context, reg *cluster.Registry, log hclog.Logger) {
	rec := reg.OutlierEvents()
	timer := time.NewTimer(0)
	defer timer.Stop()
	var buf []outlier.Event
	var last time.Time
	for {
		select {
		case <-ctx.Done():
			return
		case <-timer.C:
		case <-rec.Wake():
			if gap := OutlierMinGap - time.Since(last); gap > 0 {
				timer.Reset(gap)
				select {
				case <-ctx.Done():
					return
				case <-timer.C:
				}
			}
		}
		now := time.Now()
		last = now
		next := reg.TickOutliers(now, rand.Uint64)
		var dropped uint64
		buf, dropped = rec.Take(buf[:0])
		logOutlierEvents(log, buf, dropped)
		clear(buf)
		wait := OutlierMaxWait
		if !next.IsZero() {
			wait = min(max(time.Until(next), 0), OutlierMaxWait)
		}
		timer.Reset(wait)
	}
}

// logOutlierEvents logs each event with its host, detector, numbers and duration.
func logOutlierEvents(log hclog.Logger, evs []outlier.Event, dropped uint64) {
	for _, e := range evs {
		switch e.Action {
		case outlier.Eject:
			log.Warn("host ejected", "service", e.Service, "host", e.Host, "detector", e.Detector.String(),
				"numbers", e.Numbers.Describe(e.Detector), "duration", e.Duration, "multiplier", e.Multiplier)
		case outlier.Return:
			reason := e.Reason
			if reason == outlier.ReasonServed {
				reason = "ejection time served"
			}
			log.Info("host returned", "service", e.Service, "host", e.Host, "detector", e.Detector.String(),
				"out_for", e.Duration.Round(time.Millisecond), "reason", reason)
		}
	}
	if dropped > 0 {
		log.Warn("outlier events not logged (queue full; /outliers and /metrics have them)", "dropped", dropped)
	}
}
