//go:build !linux

package redirect

import (
	"context"
	"errors"
)

// ErrUnsupported: cgroup eBPF interception exists on Linux only.
var ErrUnsupported = errors.New("redirect: eBPF interception needs Linux")

// Redirect is one attachment (never made off Linux).
type Redirect struct{}

// Attach fails off Linux.
func Attach(Config) (*Redirect, error) { return nil, ErrUnsupported }

// SelfTest fails off Linux.
func SelfTest(context.Context, string) error { return ErrUnsupported }

// Close does nothing.
func (*Redirect) Close() error { return nil }

// Stats are the programs' counters.
type Stats struct{ Redirected, DNSRedirected, Excluded, OrigDstAnswered, OrigDstMissed, SaveFailed uint64 }

// Stats fails off Linux.
func (*Redirect) Stats() (Stats, error) { return Stats{}, ErrUnsupported }

// OwnCgroup fails off Linux.
func OwnCgroup() (string, error) { return "", ErrUnsupported }

// Check fails off Linux.
func Check() error { return ErrUnsupported }
