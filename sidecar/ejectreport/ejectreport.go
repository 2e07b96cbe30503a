// Package ejectreport sends pilot a compact summary of the sidecar's current
// outlier ejections (internal/outlierreport), so pilot can show that many
// clients eject the same host.
//
// Reporting is feedback, and degrades first (seed 000, "Data-plane feedback must
// also degrade safely"): the request path never touches the reporter (it reads
// a snapshot of the ejections from the registry on its own goroutine); at most
// one report is in flight, bounded by SendTimeout; nothing is queued: a change
// while a report is in flight is picked up by the next read of the snapshot
// (coalesced), and a report that cannot go (no stream, memory shedding, pilot
// slow or refusing) is dropped and counted.
package ejectreport

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync/atomic"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	grpcstatus "google.golang.org/grpc/status"

	"github.com/weft-mesh/weft/internal/outlierreport"
)

// Defaults of Config.
const (
	// DefaultCheckInterval is how often the ejection snapshot is read. A change
	// reaches pilot within it (or MinSendInterval after the previous report).
	DefaultCheckInterval = time.Second
	// DefaultSendTimeout bounds one report; past it the report is dropped.
	DefaultSendTimeout = 2 * time.Second
	// MaxSendTimeout bounds Config.SendTimeout: a send never holds the reporter
	// longer than one MinSendInterval.
	MaxSendTimeout = outlierreport.MinSendInterval
)

// Results counted in weft_sidecar_outlier_reports_total.
const (
	ResultSent     = "sent"
	ResultNoStream = "dropped_no_stream" // no ADS stream to pilot is up
	ResultOverload = "dropped_overload"  // the sidecar is shedding load
	ResultTimeout  = "dropped_timeout"   // pilot did not answer within SendTimeout
	ResultRefused  = "dropped_refused"   // pilot refused it (rate, bounds, unknown node, busy)
	ResultError    = "dropped_error"     // anything else (connection failed, encoding)
)

var results = [...]string{ResultSent, ResultNoStream, ResultOverload, ResultTimeout, ResultRefused, ResultError}

// Config configures a Reporter.
type Config struct {
	Node   string // the node id the ADS stream presents
	Logger hclog.Logger
	// Source returns the ejections at now. It is called on the reporter's
	// goroutine only and must not block (a snapshot read).
	Source func(now time.Time) []outlierreport.Entry
	// Conn returns the connection of the live ADS stream, nil while none is up.
	Conn func() grpc.ClientConnInterface
	// Shedding reports whether the sidecar is shedding load; reports are then
	// dropped. nil: never.
	Shedding func() bool
	// Registerer gets the reporter's counters; nil: not registered.
	Registerer prometheus.Registerer

	CheckInterval time.Duration // 0: DefaultCheckInterval
	SendTimeout   time.Duration // 0: DefaultSendTimeout; at most MaxSendTimeout
	// MinInterval and Refresh default to outlierreport's MinSendInterval and
	// RefreshInterval (pilot's rate and TTL assume them); tests shorten them.
	MinInterval time.Duration
	Refresh     time.Duration
}

// Reporter is the shell: Run reads the source every CheckInterval and sends
// what Due says. Create with New.
type Reporter struct {
	cfg    Config
	counts [len(results)]atomic.Uint64 // by index in results
	st     state                       // owned by Run's goroutine
}

// New checks cfg.
func New(cfg Config) (*Reporter, error) {
	var errs []error
	if cfg.Logger == nil {
		errs = append(errs, errors.New("a Logger is required"))
	}
	if err := (&outlierreport.Report{Node: cfg.Node}).Validate(); err != nil {
		errs = append(errs, err)
	}
	if cfg.Source == nil || cfg.Conn == nil {
		errs = append(errs, errors.New("a Source and a Conn are required"))
	}
	if cfg.CheckInterval == 0 {
		cfg.CheckInterval = DefaultCheckInterval
	}
	if cfg.SendTimeout == 0 {
		cfg.SendTimeout = DefaultSendTimeout
	}
	if cfg.MinInterval == 0 {
		cfg.MinInterval = outlierreport.MinSendInterval
	}
	if cfg.Refresh == 0 {
		cfg.Refresh = outlierreport.RefreshInterval
	}
	if cfg.Shedding == nil {
		cfg.Shedding = func() bool { return false }
	}
	for _, d := range []struct {
		name string
		v    time.Duration
	}{{"CheckInterval", cfg.CheckInterval}, {"SendTimeout", cfg.SendTimeout}, {"MinInterval", cfg.MinInterval}, {"Refresh", cfg.Refresh}} {
		if d.v < 0 {
			errs = append(errs, fmt.Errorf("%s %v is negative", d.name, d.v))
		}
	}
	if cfg.SendTimeout > MaxSendTimeout {
		errs = append(errs, fmt.Errorf("send timeout %v exceeds %v", cfg.SendTimeout, MaxSendTimeout))
	}
	if cfg.Refresh > outlierreport.RefreshInterval {
		errs = append(errs, fmt.Errorf("refresh %v exceeds %v (pilot forgets a report after %v)", cfg.Refresh, outlierreport.RefreshInterval, outlierreport.TTL))
	}
	if err := errors.Join(errs...); err != nil {
		return nil, fmt.Errorf("outlier reporter: %w", err)
	}
	r := &Reporter{cfg: cfg, st: state{minInterval: cfg.MinInterval, refresh: cfg.Refresh}}
	if cfg.Registerer != nil {
		if err := cfg.Registerer.Register(collector{r}); err != nil {
			return nil, fmt.Errorf("outlier reporter: metrics: %w", err)
		}
	}
	return r, nil
}

// Count is how many reports ended with result (the Result* constants).
func (r *Reporter) Count(result string) uint64 {
	if i := slices.Index(results[:], result); i >= 0 {
		return r.counts[i].Load()
	}
	return 0
}

func (r *Reporter) count(result string) { r.counts[slices.Index(results[:], result)].Add(1) }

var reportsDesc = prometheus.NewDesc("weft_sidecar_outlier_reports_total",
	"Outlier ejection reports to pilot, by result: sent, or dropped (no_stream, overload, timeout, refused, error); never queued.",
	[]string{"result"}, nil)

type collector struct{ r *Reporter }

func (c collector) Describe(ch chan<- *prometheus.Desc) { ch <- reportsDesc }

func (c collector) Collect(ch chan<- prometheus.Metric) {
	for i, res := range results {
		ch <- prometheus.MustNewConstMetric(reportsDesc, prometheus.CounterValue, float64(c.r.counts[i].Load()), res)
	}
}

// Run reports until ctx ends.
func (r *Reporter) Run(ctx context.Context) {
	t := time.NewTicker(r.cfg.CheckInterval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case now := <-t.C:
			r.step(ctx, now)
		}
	}
}

// step is one check: read the snapshot, decide, maybe send (blocking this
// goroutine for at most SendTimeout; the ticker drops the ticks missed meanwhile).
func (r *Reporter) step(ctx context.Context, now time.Time) {
	if !r.st.mayAttempt(now) {
		return // not even the snapshot is read
	}
	cc := r.cfg.Conn()
	rep := outlierreport.Fit(r.cfg.Node, r.cfg.Source(now))
	key := keyOf(&rep)
	if !r.st.Due(now, key, cc) {
		return
	}
	r.st.attempted(now)
	res := r.send(ctx, cc, &rep)
	r.count(res)
	if res == ResultSent {
		r.st.sent(now, key, cc)
	}
}

func (r *Reporter) send(ctx context.Context, cc grpc.ClientConnInterface, rep *outlierreport.Report) string {
	if cc == nil {
		return ResultNoStream
	}
	if r.cfg.Shedding() {
		return ResultOverload
	}
	b, err := outlierreport.Encode(rep)
	if err != nil {
		r.cfg.Logger.Warn("outlier report not sent", "error", err)
		return ResultError
	}
	ctx, cancel := context.WithTimeout(ctx, r.cfg.SendTimeout)
	defer cancel()
	err = outlierreport.Send(ctx, cc, b)
	switch c := grpcstatus.Code(err); {
	case err == nil:
		return ResultSent
	case c == codes.DeadlineExceeded:
		r.cfg.Logger.Debug("outlier report dropped: pilot did not answer in time", "timeout", r.cfg.SendTimeout)
		return ResultTimeout
	case c == codes.InvalidArgument || c == codes.FailedPrecondition || c == codes.ResourceExhausted:
		r.cfg.Logger.Debug("outlier report refused by pilot", "error", err)
		return ResultRefused
	default:
		r.cfg.Logger.Debug("outlier report failed", "error", err)
		return ResultError
	}
}

// key is what a report says apart from ages (which change every tick): two
// reports with equal keys need not both be sent.
type key struct {
	total   uint32
	entries []keyEntry
}

type keyEntry struct {
	service, endpoint string
	detector          outlierreport.Detector
	times             uint32
}

func keyOf(r *outlierreport.Report) key {
	k := key{total: r.Total, entries: make([]keyEntry, len(r.Entries))}
	for i, e := range r.Entries {
		k.entries[i] = keyEntry{e.Service, e.Endpoint, e.Detector, e.Times}
	}
	return k
}

func (a key) equal(b key) bool { return a.total == b.total && slices.Equal(a.entries, b.entries) }

// state is the pure part: when a report is due. It reads no clock.
type state struct {
	minInterval, refresh time.Duration

	lastAttempt time.Time
	lastSent    time.Time
	sentKey     key
	sentConn    grpc.ClientConnInterface // the connection the last report went on
	everSent    bool
}

// Due reports whether a report with key k should go now on cc: never within
// minInterval of the previous attempt (pilot's rate; a refused or dropped
// report waits too); then when nothing was sent yet, the ejections changed, the
// stream is a new one (pilot dropped our report when the old one ended), or
// refresh has passed since the last report pilot took.
func (s *state) Due(now time.Time, k key, cc grpc.ClientConnInterface) bool {
	if !s.mayAttempt(now) {
		return false
	}
	return !s.everSent || !k.equal(s.sentKey) || cc != s.sentConn || now.Sub(s.lastSent) >= s.refresh
}

func (s *state) mayAttempt(now time.Time) bool {
	return s.lastAttempt.IsZero() || now.Sub(s.lastAttempt) >= s.minInterval
}

func (s *state) attempted(now time.Time) { s.lastAttempt = now }

func (s *state) sent(now time.Time, k key, cc grpc.ClientConnInterface) {
	s.lastSent, s.sentKey, s.sentConn, s.everSent = now, k, cc, true
}
