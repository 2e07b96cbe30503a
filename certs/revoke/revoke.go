// Package revoke builds and reads the mesh's certificate revocation list: one
// CRL, signed by the CA's current signing root, listing every revoked serial
// whatever root issued it (serials are random 128-bit, so they do not collide).
package revoke

import (
	"crypto"
	"crypto/rand"
	"crypto/x509"
	"errors"
	"fmt"
	"math/big"
	"time"

	"github.com/weft-mesh/weft/certs/bundle"
)

// Defaults: a CRL is valid an hour past ThisUpdate (pilot re-signs at half of
// it), and a checker accepts one past NextUpdate for another hour (Lapsed)
// before it refuses new handshakes (Expired).
const (
	DefaultValidity = time.Hour
	DefaultGrace    = time.Hour
)

// Bounds on what Parse accepts. MaxEntries matches pilot's default issued
// registry bound (100k); an entry is ~40 bytes of DER, so MaxBytes leaves room.
const (
	MaxEntries = 100_000
	MaxBytes   = 8 << 20
)

// Entry is one revoked certificate.
type Entry struct {
	Serial    *big.Int
	RevokedAt time.Time
	Reason    int // RFC 5280 CRLReason; 0 unspecified
}

// Build signs a CRL (number, thisUpdate, thisUpdate+validity) with issuer/key.
func Build(issuer *x509.Certificate, key crypto.Signer, number int64, entries []Entry, thisUpdate time.Time, validity time.Duration) ([]byte, error) {
	switch {
	case issuer == nil || key == nil:
		return nil, errors.New("build CRL: no issuer or key")
	case number < 0:
		return nil, fmt.Errorf("build CRL: number %d is negative", number)
	case validity <= 0:
		return nil, fmt.Errorf("build CRL: validity %v is not positive", validity)
	case len(entries) > MaxEntries:
		return nil, fmt.Errorf("build CRL: %d entries, over the bound of %d", len(entries), MaxEntries)
	case thisUpdate.IsZero():
		return nil, errors.New("build CRL: zero thisUpdate")
	}
	rev := make([]x509.RevocationListEntry, len(entries))
	for i, e := range entries {
		if e.Serial == nil || e.Serial.Sign() <= 0 {
			return nil, fmt.Errorf("build CRL: entry %d: serial %v is not positive", i, e.Serial)
		}
		if e.Reason < 0 || e.Reason > 10 || e.Reason == 7 {
			return nil, fmt.Errorf("build CRL: entry %d (serial %x): reason %d is not an RFC 5280 CRLReason", i, e.Serial, e.Reason)
		}
		rev[i] = x509.RevocationListEntry{SerialNumber: e.Serial, RevocationTime: e.RevokedAt.UTC(), ReasonCode: e.Reason}
	}
	der, err := x509.CreateRevocationList(rand.Reader, &x509.RevocationList{
		Number:                    big.NewInt(number),
		ThisUpdate:                thisUpdate.UTC(),
		NextUpdate:                thisUpdate.Add(validity).UTC(),
		RevokedCertificateEntries: rev,
	}, issuer, key)
	if err != nil {
		return nil, fmt.Errorf("build CRL number %d: %w", number, err)
	}
	return der, nil
}

// CRL is a parsed, signature-checked revocation list; immutable.
type CRL struct {
	number     int64
	thisUpdate time.Time
	nextUpdate time.Time
	issuer     *x509.Certificate
	revoked    map[string]struct{} // key: serial's big-endian bytes
	entries    []Entry
}

// Parse reads a DER CRL (at most MaxBytes, MaxEntries) and checks that a root
// of b signed it. A CRL without NextUpdate or number is refused: freshness is
// what the checker enforces.
func Parse(der []byte, b *bundle.Bundle) (*CRL, error) {
	if len(der) > MaxBytes {
		return nil, fmt.Errorf("CRL: %d bytes, over the bound of %d", len(der), MaxBytes)
	}
	if b == nil {
		return nil, errors.New("CRL: no trust bundle to check it against")
	}
	rl, err := x509.ParseRevocationList(der)
	if err != nil {
		return nil, fmt.Errorf("CRL: %w", err)
	}
	var issuer *x509.Certificate
	var sigErr error
	for _, r := range b.Roots() {
		if err := rl.CheckSignatureFrom(r); err == nil {
			issuer = r
			break
		} else if sigErr == nil {
			sigErr = err
		}
	}
	if issuer == nil {
		return nil, fmt.Errorf("CRL number %v (issuer %q): not signed by any root of the trust bundle: %v", rl.Number, rl.Issuer, sigErr)
	}
	switch {
	case rl.Number == nil || !rl.Number.IsInt64() || rl.Number.Sign() < 0:
		return nil, fmt.Errorf("CRL: number %v is missing or out of range", rl.Number)
	case rl.NextUpdate.IsZero():
		return nil, fmt.Errorf("CRL number %v: no NextUpdate", rl.Number)
	case !rl.NextUpdate.After(rl.ThisUpdate):
		return nil, fmt.Errorf("CRL number %v: NextUpdate %v is not after ThisUpdate %v", rl.Number, rl.NextUpdate, rl.ThisUpdate)
	case len(rl.RevokedCertificateEntries) > MaxEntries:
		return nil, fmt.Errorf("CRL number %v: %d entries, over the bound of %d", rl.Number, len(rl.RevokedCertificateEntries), MaxEntries)
	}
	c := &CRL{
		number:     rl.Number.Int64(),
		thisUpdate: rl.ThisUpdate,
		nextUpdate: rl.NextUpdate,
		issuer:     issuer,
		revoked:    make(map[string]struct{}, len(rl.RevokedCertificateEntries)),
		entries:    make([]Entry, 0, len(rl.RevokedCertificateEntries)),
	}
	for _, e := range rl.RevokedCertificateEntries {
		if e.SerialNumber == nil {
			continue
		}
		c.revoked[string(e.SerialNumber.Bytes())] = struct{}{}
		c.entries = append(c.entries, Entry{Serial: e.SerialNumber, RevokedAt: e.RevocationTime, Reason: e.ReasonCode})
	}
	return c, nil
}

// Revoked reports whether serial is listed. It does not allocate (the map
// lookup of a []byte→string conversion is optimised by the compiler; serials
// up to 20 bytes fit the stack buffer).
func (c *CRL) Revoked(serial *big.Int) bool {
	if serial == nil {
		return false
	}
	var buf [32]byte
	n := (serial.BitLen() + 7) / 8
	if n > len(buf) {
		_, ok := c.revoked[string(serial.Bytes())]
		return ok
	}
	serial.FillBytes(buf[:n])
	_, ok := c.revoked[string(buf[:n])]
	return ok
}

// Number is the CRL number (monotonic per CA).
func (c *CRL) Number() int64 { return c.number }

// ThisUpdate is when the CRL was signed.
func (c *CRL) ThisUpdate() time.Time { return c.thisUpdate }

// NextUpdate is when the CRL stops being fresh.
func (c *CRL) NextUpdate() time.Time { return c.nextUpdate }

// Len is the number of revoked serials.
func (c *CRL) Len() int { return len(c.entries) }

// Entries is a copy of the revoked entries.
func (c *CRL) Entries() []Entry { return append([]Entry(nil), c.entries...) }

// Issuer is the root of the bundle that signed the CRL.
func (c *CRL) Issuer() *x509.Certificate { return c.issuer }

// State of a CRL at a time.
type State uint8

const (
	Fresh   State = iota // at or before NextUpdate
	Lapsed               // past NextUpdate, within grace
	Expired              // past NextUpdate + grace: refuse new handshakes
)

func (s State) String() string {
	switch s {
	case Fresh:
		return "fresh"
	case Lapsed:
		return "lapsed"
	case Expired:
		return "expired"
	}
	return fmt.Sprintf("State(%d)", uint8(s))
}

// State is Fresh up to and at NextUpdate, Lapsed after it up to and at
// NextUpdate+grace, Expired after that. A negative grace counts as zero.
func (c *CRL) State(now time.Time, grace time.Duration) State {
	if grace < 0 {
		grace = 0
	}
	switch {
	case !now.After(c.nextUpdate):
		return Fresh
	case !now.After(c.nextUpdate.Add(grace)):
		return Lapsed
	}
	return Expired
}

// PEM wraps a DER CRL as a PEM "X509 CRL" block (what SDS's crl inline_bytes
// carries).
func PEM(der []byte) []byte { return pemEncode(der) }

// ParsePEM reads one PEM "X509 CRL" block and Parses it.
func ParsePEM(pemBytes []byte, b *bundle.Bundle) (*CRL, error) {
	der, err := pemDecode(pemBytes)
	if err != nil {
		return nil, err
	}
	return Parse(der, b)
}
