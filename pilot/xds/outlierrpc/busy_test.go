package outlierrpc

import (
	"context"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/grpc/codes"
	grpcstatus "google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/weft-mesh/weft/internal/outlierreport"
	"github.com/weft-mesh/weft/pilot/status"
)

// At MaxConcurrent reports in hand, one more is refused at once without being
// decoded; below it, a report is handled (here refused later: no stream).
func TestBusyDropsAtOnce(t *testing.T) {
	tr, err := status.New(status.Config{Logger: hclog.NewNullLogger(), Registerer: prometheus.NewRegistry(),
		Retention: time.Minute, MaxDisconnected: 10, MaxRevisions: 10})
	if err != nil {
		t.Fatal(err)
	}
	s, err := New(Config{Status: tr, TrustDomain: "cluster.local", Logger: hclog.NewNullLogger(), MaxConcurrent: 2})
	if err != nil {
		t.Fatal(err)
	}
	b, err := outlierreport.Encode(&outlierreport.Report{Node: "n"})
	if err != nil {
		t.Fatal(err)
	}
	s.sem <- struct{}{} // one report in hand: below the bound
	_, err = s.Report(context.Background(), wrapperspb.Bytes(b))
	if c := grpcstatus.Code(err); c != codes.FailedPrecondition {
		t.Fatalf("below the bound: %v, want it handled (FailedPrecondition: no stream)", err)
	}
	s.sem <- struct{}{} // at the bound
	_, err = s.Report(context.Background(), wrapperspb.Bytes(b))
	if grpcstatus.Code(err) != codes.ResourceExhausted || grpcstatus.Convert(err).Message() != "outlier report dropped: pilot is handling 2 reports already" {
		t.Fatalf("at the bound: %v", err)
	}
	if _, err := New(Config{Status: tr, Logger: hclog.NewNullLogger()}); err == nil {
		t.Error("MaxConcurrent 0 accepted")
	}
}
