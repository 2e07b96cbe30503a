package ca

import (
	"fmt"

	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// CSR results counted by weft_pilot_ca_csr_total{result}.
const (
	ResultIssued          = "issued"
	ResultUnauthenticated = "unauthenticated"
	ResultDenied          = "denied"
	ResultInvalid         = "invalid"
	ResultExhausted       = "exhausted"
	ResultError           = "error"
)

type metrics struct {
	csr *prometheus.CounterVec
}

func resultOf(err error) string {
	if err == nil {
		return ResultIssued
	}
	switch status.Code(err) {
	case codes.Unauthenticated:
		return ResultUnauthenticated
	case codes.PermissionDenied:
		return ResultDenied
	case codes.InvalidArgument:
		return ResultInvalid
	case codes.ResourceExhausted:
		return ResultExhausted
	}
	return ResultError
}

// register registers the CA's metrics on reg (none when reg is nil).
func (s *Service) register(reg prometheus.Registerer) error {
	s.metrics = &metrics{csr: prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "weft_pilot_ca_csr_total", Help: "CSRs answered by the mesh CA, by result (issued, unauthenticated, denied, invalid, exhausted, error).",
	}, []string{"result"})}
	for _, r := range []string{ResultIssued, ResultUnauthenticated, ResultDenied, ResultInvalid, ResultExhausted, ResultError} {
		s.metrics.csr.WithLabelValues(r)
	}
	if reg == nil {
		return nil
	}
	locked := func(f func(r *registry) int) func() float64 {
		return func() float64 {
			s.mu.Lock()
			defer s.mu.Unlock()
			return float64(f(s.reg))
		}
	}
	cs := []prometheus.Collector{
		s.metrics.csr,
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "weft_pilot_ca_issued_entries", Help: "Certificates in the issued registry (bounded by --max-issued)."},
			locked(func(r *registry) int { return len(r.issued) })),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "weft_pilot_ca_revoked_serials", Help: "Serials the CRL lists."},
			locked(func(r *registry) int { return len(r.revoked) })),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "weft_pilot_ca_crl_number", Help: "Number of the CRL pilot publishes."},
			func() float64 { return float64(s.crl.Load().Number()) }),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "weft_pilot_ca_crl_next_update_timestamp_seconds", Help: "NextUpdate of the CRL pilot publishes."},
			func() float64 { return float64(s.crl.Load().NextUpdate().Unix()) }),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "weft_pilot_ca_signer_not_after_timestamp_seconds", Help: "NotAfter of the root (or intermediate) that signs."},
			func() float64 { return float64(s.ca.Signer().NotAfter.Unix()) }),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "weft_pilot_ca_rotating", Help: "1 while a root rotation is in progress (the bundle carries the old and the new root)."},
			func() float64 {
				if s.ca.Rotating() != nil {
					return 1
				}
				return 0
			}),
	}
	for _, c := range cs {
		if err := reg.Register(c); err != nil {
			return fmt.Errorf("pilot ca: metrics: %w", err)
		}
	}
	return nil
}
