package ca

import (
	"testing"
	"time"

	"github.com/weft-mesh/weft/certs/csrrpc"
)

// BenchmarkCSR is one enrollment end to end: a CSR with a bootstrap token over
// a real TLS gRPC connection (kept open), verified, signed, recorded.
func BenchmarkCSR(b *testing.B) {
	s := newService(b, b.TempDir(), func(c *ServiceConfig) { c.MaxIssued = 1 << 30 })
	addr := serveTLS(b, s)
	cc := dial(b, s, addr, nil, nil)
	w := newWorkload(b)
	csr := w.csr(b, reviews)
	tok, _, err := s.IssueToken("shop", "reviews", time.Hour)
	if err != nil {
		b.Fatal(err)
	}
	b.ReportAllocs()
	for b.Loop() {
		if _, err := csrrpc.Sign(b.Context(), cc, csr, tok); err != nil {
			b.Fatal(err)
		}
	}
}
