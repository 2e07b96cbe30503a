// Package outlierrpc serves internal/outlierreport's Report RPC on pilot's xDS
// gRPC server, beside ADS: it decodes a sidecar's ejection summary strictly and
// hands it to the status tracker, which checks it against the node's ADS stream
// and aggregates it. A report is trusted by the identity of its sender: from an
// authenticated sidecar (a verified client certificate), its SPIFFE ID must be
// the one of the node's ADS stream; from a plaintext sender, its transport
// address must be that stream's.
//
// Reports are the first thing pilot drops under load: at most MaxConcurrent are
// handled at once and one more is refused at once (ResourceExhausted), never
// queued; the sidecar sends again on its next change or refresh.
package outlierrpc

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/hashicorp/go-hclog"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	grpcstatus "google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/emptypb"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/weft-mesh/weft/internal/outlierreport"
	"github.com/weft-mesh/weft/pilot/status"
	"github.com/weft-mesh/weft/pilot/status/outlieragg"
	"github.com/weft-mesh/weft/pilot/xds/authn"
)

// DefaultMaxConcurrent is how many reports pilot handles at once by default.
// Handling one is a decode and a map update (microseconds), so this only
// matters when pilot is starved of CPU, which is when reports should go first.
const DefaultMaxConcurrent = 4

// Config configures a Server.
type Config struct {
	Status        *status.Tracker
	TrustDomain   string // the mesh's; a certificate of another is refused
	Logger        hclog.Logger
	MaxConcurrent int              // reports handled at once; > 0
	Clock         func() time.Time // nil = time.Now
}

// Server implements outlierreport.Server.
type Server struct {
	cfg Config
	sem chan struct{} // one token per report being handled
}

var _ outlierreport.Server = (*Server)(nil)

// New checks cfg.
func New(cfg Config) (*Server, error) {
	switch {
	case cfg.Status == nil:
		return nil, errors.New("outlierrpc: Config.Status is required")
	case cfg.Logger == nil:
		return nil, errors.New("outlierrpc: Config.Logger is required")
	case cfg.TrustDomain == "":
		return nil, errors.New("outlierrpc: Config.TrustDomain is required")
	case cfg.MaxConcurrent <= 0:
		return nil, fmt.Errorf("outlierrpc: Config.MaxConcurrent must be > 0, got %d", cfg.MaxConcurrent)
	}
	if cfg.Clock == nil {
		cfg.Clock = time.Now
	}
	return &Server{cfg: cfg, sem: make(chan struct{}, cfg.MaxConcurrent)}, nil
}

// Register registers the service on g.
func (s *Server) Register(g *grpc.Server) { g.RegisterService(&outlierreport.ServiceDesc, s) }

// Report handles one report.
func (s *Server) Report(ctx context.Context, req *wrapperspb.BytesValue) (*emptypb.Empty, error) {
	select {
	case s.sem <- struct{}{}:
		defer func() { <-s.sem }()
	default:
		s.cfg.Status.CountOutlierReport(status.ReportBusy)
		return nil, grpcstatus.Errorf(codes.ResourceExhausted, "outlier report dropped: pilot is handling %d reports already", s.cfg.MaxConcurrent)
	}
	p, err := authn.Identify(ctx, s.cfg.TrustDomain, false)
	if err != nil {
		s.cfg.Status.CountOutlierReport(status.ReportUnknownNode)
		return nil, grpcstatus.Error(codes.Unauthenticated, "outlier report: "+err.Error())
	}
	// The same principal the ADS stream was tracked with (ads.reporter).
	from := p.Addr
	if p.Authenticated {
		from = p.ID.String()
	}
	r, err := outlierreport.Decode(req.GetValue())
	if err != nil {
		s.cfg.Status.CountOutlierReport(status.ReportInvalid)
		s.cfg.Logger.Debug("outlier report refused", "peer", from, "error", err)
		return nil, grpcstatus.Error(codes.InvalidArgument, err.Error())
	}
	if err := s.cfg.Status.ReportOutliers(from, r, s.cfg.Clock()); err != nil {
		s.cfg.Logger.Debug("outlier report refused", "node", r.Node, "peer", from, "error", err)
		code := codes.Internal
		switch {
		case errors.Is(err, status.ErrUnknownNode):
			code = codes.FailedPrecondition
		case errors.Is(err, outlieragg.ErrRateLimited), errors.Is(err, outlieragg.ErrFull):
			code = codes.ResourceExhausted
		}
		return nil, grpcstatus.Error(code, err.Error())
	}
	return &emptypb.Empty{}, nil
}
