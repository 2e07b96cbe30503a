package ca

import (
	"fmt"
	"time"
)

// A bootstrap token may be presented again within its TTL (a restarted sidecar
// makes a new key and enrolls with it again, as the key never leaves the
// process), so tokens are not single-use; instead each token's CSRs are
// rate-limited, or one leaked token could fill the issued registry.
const (
	// DefaultTokenCSRs is how many CSRs one bootstrap token may make per
	// TokenCSRWindow (ServiceConfig.TokenCSRs): a sidecar makes one per start,
	// and one per expiry of its certificate while pilot was away.
	DefaultTokenCSRs = 10
	// MaxTokenCSRs bounds ServiceConfig.TokenCSRs.
	MaxTokenCSRs = 10_000
	// TokenCSRWindow is the window of TokenCSRs.
	TokenCSRWindow = time.Minute
	// MaxTrackedTokens bounds the tokens whose use is counted at once. A token
	// is forgotten once it has expired; with this many unexpired tokens in use a
	// CSR by a new token is refused (failing closed) until one expires.
	MaxTrackedTokens = 100_000
)

// tokenUses counts CSRs per bootstrap token. Pure: the caller passes now and
// holds the lock (Service.mu).
type tokenUses struct {
	limit int
	max   int // MaxTrackedTokens; a field so tests can reach the bound
	m     map[string]tokenUse
}

type tokenUse struct {
	windowStart time.Time
	n           int
	expiry      time.Time // the token's exp: after it the entry is dropped
}

func newTokenUses(limit int) *tokenUses {
	return &tokenUses{limit: limit, max: MaxTrackedTokens, m: map[string]tokenUse{}}
}

// take counts one CSR of the token key (expiring at expiry) at now, or says
// why it is refused.
func (u *tokenUses) take(key string, expiry, now time.Time) error {
	e, ok := u.m[key]
	if !ok {
		if len(u.m) >= u.max {
			for k, v := range u.m {
				if !now.Before(v.expiry) {
					delete(u.m, k)
				}
			}
		}
		if len(u.m) >= u.max {
			return fmt.Errorf("%d bootstrap tokens in use, the most pilot counts at once: a new token may enroll once one expires", u.max)
		}
		e = tokenUse{windowStart: now, expiry: expiry}
	}
	if now.Sub(e.windowStart) >= TokenCSRWindow {
		e.windowStart, e.n = now, 0
	}
	if e.n >= u.limit {
		return fmt.Errorf("this bootstrap token made %d CSRs since %s, the most per %v", e.n, e.windowStart.UTC().Format(time.RFC3339), TokenCSRWindow)
	}
	e.n++
	u.m[key] = e
	return nil
}
