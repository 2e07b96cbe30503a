package outlierreport

import (
	"encoding/binary"
	"slices"
	"strings"
	"time"
)

// Version is the first byte of every encoded report.
const Version = 1

// The encoding, version 1 (uvarints are minimal: a longer encoding of the same
// number is refused, so every report has exactly one encoding):
//
//	byte     Version
//	string   node                      (uvarint length, bytes)
//	uvarint  total
//	uvarint  number of services S, then S strings, strictly ascending, each used
//	uvarint  number of entries N, then N times:
//	  uvarint  service index (< S)
//	  string   endpoint
//	  byte     detector
//	  uvarint  age in milliseconds
//	  uvarint  times
//
// Entries are strictly ascending by (service, endpoint). Nothing may follow.
// A service table keeps a report compact: a sidecar's ejections mostly share a
// few services, and a service key is far longer than an address.

// Encode validates r and encodes it, refusing a report past MaxReportBytes.
func Encode(r *Report) ([]byte, error) {
	if err := r.Validate(); err != nil {
		return nil, err
	}
	var svcs []string
	for i := range r.Entries {
		if s := r.Entries[i].Service; len(svcs) == 0 || svcs[len(svcs)-1] != s {
			svcs = append(svcs, s)
		}
	}
	b := make([]byte, 0, 64+32*len(r.Entries))
	b = append(b, Version)
	b = appendString(b, r.Node)
	b = binary.AppendUvarint(b, uint64(r.Total))
	b = binary.AppendUvarint(b, uint64(len(svcs)))
	for _, s := range svcs {
		b = appendString(b, s)
	}
	b = binary.AppendUvarint(b, uint64(len(r.Entries)))
	si := -1
	for i := range r.Entries {
		e := &r.Entries[i]
		if si < 0 || svcs[si] != e.Service {
			si++
		}
		b = binary.AppendUvarint(b, uint64(si))
		b = appendString(b, e.Endpoint)
		b = append(b, byte(e.Detector))
		b = binary.AppendUvarint(b, uint64(e.Age/time.Millisecond))
		b = binary.AppendUvarint(b, uint64(e.Times))
	}
	if len(b) > MaxReportBytes {
		return nil, invalid("node %s: encoded report is %d bytes, at most %d", r.Node, len(b), MaxReportBytes)
	}
	return b, nil
}

func appendString(b []byte, s string) []byte {
	b = binary.AppendUvarint(b, uint64(len(s)))
	return append(b, s...)
}

// Decode decodes and validates one report. It refuses input past MaxReportBytes
// before reading it, any count past its bound before allocating for it, a
// non-minimal number, an unknown version and trailing bytes.
func Decode(b []byte) (*Report, error) {
	if len(b) > MaxReportBytes {
		return nil, invalid("report is %d bytes, at most %d", len(b), MaxReportBytes)
	}
	// One copy of the input: every string decoded is a substring of it.
	d := decoder{b: b, s: string(b)}
	if v := d.byte("version"); d.err == nil && v != Version {
		return nil, invalid("version %d: want %d", v, Version)
	}
	r := &Report{Node: d.string("node", MaxNodeBytes)}
	r.Total = uint32(d.uvarint("total", MaxTotal))
	ns := int(d.uvarint("number of services", MaxEntries))
	var svcs []string
	if d.err == nil {
		svcs = make([]string, 0, ns)
	}
	for i := 0; i < ns && d.err == nil; i++ {
		s := d.string("service", MaxServiceBytes)
		if d.err == nil && i > 0 && s <= svcs[i-1] {
			return nil, invalid("services[%d] %q is not after %q (strictly ascending)", i, s, svcs[i-1])
		}
		svcs = append(svcs, s)
	}
	n := int(d.uvarint("number of entries", MaxEntries))
	if d.err == nil {
		r.Entries = make([]Entry, 0, n)
	}
	used := make([]bool, len(svcs))
	for i := 0; i < n && d.err == nil; i++ {
		si := d.uvarint("service index", uint64(max(len(svcs)-1, 0)))
		var e Entry
		e.Endpoint = d.string("endpoint", MaxEndpointBytes)
		e.Detector = Detector(d.byte("detector"))
		e.Age = time.Duration(d.uvarint("age", uint64(MaxAge/time.Millisecond))) * time.Millisecond
		e.Times = uint32(d.uvarint("times", MaxTimes))
		if d.err != nil {
			break
		}
		if len(svcs) == 0 {
			return nil, invalid("entries[%d]: no services listed", i)
		}
		e.Service = svcs[si]
		used[si] = true
		r.Entries = append(r.Entries, e)
	}
	if d.err != nil {
		return nil, d.err
	}
	if len(d.b) > 0 {
		return nil, invalid("%d bytes after the last entry", len(d.b))
	}
	if i := slices.Index(used, false); i >= 0 {
		return nil, invalid("services[%d] %q: no entry uses it", i, svcs[i])
	}
	if err := r.Validate(); err != nil {
		return nil, err
	}
	return r, nil
}

// decoder reads b front to back; the first error sticks and later reads return
// zero values.
type decoder struct {
	b   []byte // what is left to read
	s   string // the whole input, for substrings
	err error
}

func (d *decoder) byte(field string) byte {
	if d.err != nil {
		return 0
	}
	if len(d.b) == 0 {
		d.err = invalid("%s: truncated", field)
		return 0
	}
	c := d.b[0]
	d.b = d.b[1:]
	return c
}

func (d *decoder) uvarint(field string, max uint64) uint64 { return d.number(field, "", max) }

// number reads a uvarint; field+suffix names it in errors (joined only then:
// decoding a report allocates nothing per entry).
func (d *decoder) number(field, suffix string, max uint64) uint64 {
	if d.err != nil {
		return 0
	}
	v, n := binary.Uvarint(d.b)
	switch {
	case n == 0:
		d.err = invalid("%s%s: truncated", field, suffix)
		return 0
	case n < 0:
		d.err = invalid("%s%s: number overflows 64 bits", field, suffix)
		return 0
	case n != uvarintLen(v):
		d.err = invalid("%s%s: %d encoded in %d bytes, not minimally", field, suffix, v, n)
		return 0
	case v > max:
		d.err = invalid("%s%s: %d, at most %d", field, suffix, v, max)
		return 0
	}
	d.b = d.b[n:]
	return v
}

func (d *decoder) string(field string, max int) string {
	n := int(d.number(field, " length", uint64(max)))
	if d.err != nil {
		return ""
	}
	if len(d.b) < n {
		d.err = invalid("%s: truncated (%d bytes announced, %d left)", field, n, len(d.b))
		return ""
	}
	off := len(d.s) - len(d.b)
	d.b = d.b[n:]
	return d.s[off : off+n]
}

func uvarintLen(v uint64) int {
	n := 1
	for v >= 0x80 {
		v >>= 7
		n++
	}
	return n
}

// Fit builds the report a sidecar sends from the ejections it holds: sorted,
// duplicates and entries that would not validate left out, and cut to
// MaxEntries and to what fits in MaxReportBytes. Total counts every ejection
// given, so pilot can say when a report is partial. It does not modify entries.
func Fit(node string, entries []Entry) Report {
	r := Report{Node: node, Total: uint32(min(len(entries), MaxTotal))}
	sorted := slices.Clone(entries)
	slices.SortFunc(sorted, func(a, b Entry) int {
		if c := strings.Compare(a.Service, b.Service); c != 0 {
			return c
		}
		return strings.Compare(a.Endpoint, b.Endpoint)
	})
	// Counts are reserved at their widest, so the sum never undershoots.
	size := 1 + uvarintLen(uint64(len(node))) + len(node) + uvarintLen(MaxTotal) + 2*uvarintLen(MaxEntries)
	last := ""
	for i := range sorted {
		e := sorted[i]
		e.Age = e.Age.Truncate(time.Millisecond)
		if len(r.Entries) == MaxEntries {
			break
		}
		if e.validate() != nil || len(r.Entries) > 0 && !less(&r.Entries[len(r.Entries)-1], &e) {
			continue
		}
		add := uvarintLen(MaxEntries) + uvarintLen(uint64(len(e.Endpoint))) + len(e.Endpoint) + 1 +
			uvarintLen(uint64(e.Age/time.Millisecond)) + uvarintLen(uint64(e.Times))
		if e.Service != last {
			add += uvarintLen(uint64(len(e.Service))) + len(e.Service)
		}
		if size+add > MaxReportBytes {
			break
		}
		size += add
		last = e.Service
		r.Entries = append(r.Entries, e)
	}
	return r
}
