package status

import (
	"errors"
	"fmt"
	"time"

	"github.com/weft-mesh/weft/internal/outlierreport"
	"github.com/weft-mesh/weft/pilot/status/outlieragg"
	"github.com/weft-mesh/weft/pilot/xds/snapshot"
)

// ErrUnknownNode refuses an outlier report whose node has no live ADS stream
// of the principal that sent it.
var ErrUnknownNode = errors.New("no ADS stream of this node from this peer")

// Outlier report results counted in weft_pilot_outlier_reports_total.
const (
	ReportAccepted    = "accepted"
	ReportInvalid     = "invalid"
	ReportUnknownNode = "unknown_node"
	ReportRateLimited = "rate_limited"
	ReportFull        = "full"
	ReportBusy        = "busy"
)

// ReportOutliers replaces r.Node's outlier report with r, received from peer
// at now. peer is the sender's principal as the ADS stream was tracked with it
// (ConnectFrom): the SPIFFE ID of an authenticated sender, the transport address
// of a plaintext one (the sidecar sends reports on its ADS connection). What is
// trusted: the node's live stream holds its node id (pilot refuses a second claim
// by another identity) and came from the same principal. A node with no live
// stream, or whose stream came from elsewhere, is refused with ErrUnknownNode;
// past a bound, outlieragg.ErrRateLimited or outlieragg.ErrFull. r must be valid.
func (t *Tracker) ReportOutliers(peer string, r *outlierreport.Report, now time.Time) error {
	err := t.reportOutliers(peer, r, now)
	switch {
	case err == nil:
		t.CountOutlierReport(ReportAccepted)
	case errors.Is(err, ErrUnknownNode):
		t.CountOutlierReport(ReportUnknownNode)
	case errors.Is(err, outlieragg.ErrRateLimited):
		t.CountOutlierReport(ReportRateLimited)
	case errors.Is(err, outlieragg.ErrFull):
		t.CountOutlierReport(ReportFull)
	}
	return err
}

func (t *Tracker) reportOutliers(peer string, r *outlierreport.Report, now time.Time) error {
	// omu is held across the liveness check and the Put, and Disconnect drops
	// under omu after marking the stream gone: a report never outlives its stream.
	t.omu.Lock()
	defer t.omu.Unlock()
	c, err := t.conn(r.Node)
	if err != nil {
		return fmt.Errorf("outlier report of node %s: %w (pilot has none)", r.Node, ErrUnknownNode)
	}
	c.mu.Lock()
	gone, from := !c.disconnected.IsZero(), c.peer
	c.mu.Unlock()
	switch {
	case gone:
		return fmt.Errorf("outlier report of node %s: %w (its stream ended)", r.Node, ErrUnknownNode)
	case from == "" || from != peer:
		return fmt.Errorf("outlier report of node %s from %s: %w", r.Node, peer, ErrUnknownNode)
	}
	if err := t.outliers.Put(r.Node, c.serial, r, now); err != nil {
		return fmt.Errorf("outlier report: %w", err)
	}
	t.m.outlierEntries.Set(float64(t.outliers.Entries()))
	return nil
}

// CountOutlierReport counts one report by its result (the Report* constants);
// the gRPC service counts those refused before they reach ReportOutliers.
func (t *Tracker) CountOutlierReport(result string) {
	t.m.outlierReports.WithLabelValues(result).Inc()
}

// dropOutliers forgets c's report when c's stream ends.
func (t *Tracker) dropOutliers(c *Conn) {
	t.omu.Lock()
	t.outliers.Drop(c.id, c.serial)
	t.m.outlierEntries.Set(float64(t.outliers.Entries()))
	t.omu.Unlock()
}

// Outliers aggregates the live reports per endpoint at now. A proxy is a
// client of a service when pilot's last CDS response to it held a cluster of
// that service (outlierreport.ServiceKey).
func (t *Tracker) Outliers(now time.Time) outlieragg.View {
	t.omu.Lock()
	defer t.omu.Unlock()
	t.outliers.Expire(now)
	t.m.outlierEntries.Set(float64(t.outliers.Entries()))
	held := map[string]map[string]bool{}
	for id, serial := range t.outliers.Reporters() {
		if c, err := t.conn(id); err == nil && c.serial == serial {
			held[id] = c.services()
		}
	}
	return t.outliers.View(now, func(node, service string) bool { return held[node][service] })
}

// services are the service keys of the clusters last sent on c.
func (c *Conn) services() map[string]bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	out := map[string]bool{}
	r := c.types[snapshot.ClusterType]
	if r == nil || r.sent == nil {
		return out
	}
	for name := range r.sent.Resources[snapshot.ClusterType] {
		if _, ok := r.only[name]; r.only == nil || ok {
			out[outlierreport.ServiceKey(name)] = true
		}
	}
	return out
}
