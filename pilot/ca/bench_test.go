package ca

import (
	"testing"
	"time"

	"github.com/weft-mesh/weft/certs/csrrpc"
)

// BenchmarkCSR is one enrollment end to end: a CSR with a bootstrap token over
// a real TLS gRPC connection (kept open), verified, signed, recorded.
func BenchmarkCSR(b *testing.B) {
	s := newService(b, b.TempDir(), func(c *ServiceConfig) { c.MaxIssued, c.TokenCSRs = 1<<30, MaxTokenCSRs })
	addr := serveTLS(b, s)
	cc := dial(b, s, addr, nil, nil)
	w := newWorkload(b)
	csr := w.csr(b, reviews)
	tok, _, err := s.IssueToken("shop", "reviews", time.Hour)
	if err != nil {
		b.Fatal(err)
	}
	b.ReportAllocs()
	n := 0
	for b.Loop() {
		// A token makes at most TokenCSRs CSRs a minute: a long run takes a
		// new one before it would reach that bound.
		if n++; n%MaxTokenCSRs == 0 {
			if tok, _, err = s.IssueToken("shop", "reviews", time.Hour); err != nil {
				b.Fatal(err)
			}
		}
		if _, err := csrrpc.Sign(b.Context(), cc, csr, tok); err != nil {
			b.Fatal(err)
		}
	}
}
