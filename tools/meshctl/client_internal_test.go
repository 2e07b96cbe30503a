package meshctl

import (
	"errors"
	"net"
	"net/url"
	"os"
	"syscall"
	"testing"
)

// The reasons meshctl gives when it cannot connect to pilot (the refused case is
// also tested end to end in TestGlobalAndTransport).
func TestDialFailure(t *testing.T) {
	dial := func(err error) error {
		return &url.Error{Op: "Get", URL: "http://p:1/x", Err: &net.OpError{Op: "dial", Net: "tcp", Err: err}}
	}
	tests := []struct {
		name   string
		err    error
		want   string
		wantOK bool
	}{
		{"refused", dial(&os.SyscallError{Syscall: "connect", Err: syscall.ECONNREFUSED}), "connection refused", true},
		{"no such host", dial(&net.DNSError{Name: "pilot.invalid", Err: "no such host", IsNotFound: true}), "cannot resolve pilot.invalid: no such host", true},
		{"resolver timeout", dial(&net.DNSError{Name: "p", Err: "i/o timeout", IsTimeout: true}), "cannot resolve p: i/o timeout", true},
		{"unreachable", dial(&os.SyscallError{Syscall: "connect", Err: syscall.ENETUNREACH}), "connect: network is unreachable", true},
		{"read after connect", &url.Error{Op: "Get", URL: "http://p:1/x", Err: &net.OpError{Op: "read", Err: syscall.ECONNRESET}}, "", false},
		{"not a network error", errors.New("x"), "", false},
	}
	for _, tt := range tests {
		got, ok := dialFailure(tt.err)
		if got != tt.want || ok != tt.wantOK {
			t.Errorf("%s: dialFailure = %q, %v; want %q, %v", tt.name, got, ok, tt.want, tt.wantOK)
		}
	}
}
