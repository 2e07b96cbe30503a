// Package h2flow is HTTP/2 receive-window accounting (RFC 9113 §6.9), shared
// by the sidecar's HTTP/2 server (sidecar/h2server) and client
// (sidecar/h2client): what the peer may still send on a stream or a
// connection, and when the credit taken by received DATA goes back in a
// WINDOW_UPDATE (x/net/http2's rule). Pure: the callers hold their locks.
package h2flow

// Refresh: credit owed is returned once it reaches this, or once it is at
// least what the peer has left to send.
const Refresh = 4 << 10

// Inflow is one receive window: Avail is what the peer may still send,
// unsent the credit taken by DATA and owed back but not yet returned.
type Inflow struct {
	Avail  int32
	unsent int32
}

// Init grants n bytes.
func (f *Inflow) Init(n int32) { f.Avail = n }

// Take takes n received bytes from the window; false (nothing taken) when
// the peer sent more than it may.
func (f *Inflow) Take(n uint32) bool {
	if n > uint32(f.Avail) {
		return false
	}
	f.Avail -= int32(n)
	return true
}

// Add owes n more bytes of credit and returns what to send now in a
// WINDOW_UPDATE (0: wait until more is owed).
func (f *Inflow) Add(n int) int32 {
	f.unsent += int32(n)
	if f.unsent < Refresh && f.unsent < f.Avail {
		return 0
	}
	u := f.unsent
	f.Avail += u
	f.unsent = 0
	return u
}
