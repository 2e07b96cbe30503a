package outlierreport

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

const svcA = "outbound|9080||reviews.shop.svc.cluster.local"
const svcB = "outbound|9080||ratings.shop.svc.cluster.local"

func entry(svc, ep string) Entry {
	return Entry{Service: svc, Endpoint: ep, Detector: Consecutive5xx, Age: 1500 * time.Millisecond, Times: 1}
}

func sample() *Report {
	return &Report{Node: "sidecar~10.0.0.1~web-1.shop", Total: 3, Entries: []Entry{
		entry(svcB, "10.0.0.9:9080"),
		{Service: svcA, Endpoint: "10.0.0.3:9080", Detector: SuccessRate, Age: 42 * time.Second, Times: 3},
		{Service: svcA, Endpoint: "[fd00::3]:9080", Detector: FailurePercentageLocalOrigin, Times: 1},
	}}
}

func TestRoundTrip(t *testing.T) {
	r := sample()
	b, err := Encode(r)
	if err != nil {
		t.Fatal(err)
	}
	got, err := Decode(b)
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(r, got); diff != "" {
		t.Errorf("round trip (-sent +decoded):\n%s", diff)
	}
	// One encoding per report: re-encoding the decoded value gives the same bytes.
	b2, err := Encode(got)
	if err != nil || !bytes.Equal(b, b2) {
		t.Errorf("re-encoding: %v, equal %v", err, bytes.Equal(b, b2))
	}
	// An empty report (a refresh with nothing ejected) is valid.
	e := &Report{Node: "n"}
	if b, err := Encode(e); err != nil {
		t.Error(err)
	} else if got, err := Decode(b); err != nil || got.Node != "n" || len(got.Entries) != 0 {
		t.Errorf("empty: %+v %v", got, err)
	}
}

func TestDetectorNames(t *testing.T) {
	for d := Consecutive5xx; d <= maxDetector; d++ {
		p, err := ParseDetector(d.String())
		if err != nil || p != d {
			t.Errorf("%d: %q parses to %d, %v", d, d.String(), p, err)
		}
	}
	if _, err := ParseDetector("consecutive5XX"); err == nil {
		t.Error("a wrong-case name parsed")
	}
	if Detector(0).Valid() || Detector(8).Valid() || Detector(0).String() != "Detector(0)" {
		t.Error("0 or 8 is a detector")
	}
}

func TestValidate(t *testing.T) {
	long := func(n int) string { return strings.Repeat("a", n) }
	for _, tc := range []struct {
		name string
		edit func(r *Report)
		want string // "" = valid
	}{
		{"sample", func(r *Report) {}, ""},
		{"node empty", func(r *Report) { r.Node = "" }, "node: empty"},
		{"node at bound", func(r *Report) { r.Node = long(MaxNodeBytes) }, ""},
		{"node one past", func(r *Report) { r.Node = long(MaxNodeBytes + 1) }, "node: 257 bytes, at most 256"},
		{"node with space", func(r *Report) { r.Node = "a b" }, `node "a b": byte 1 is not printable`},
		{"node with NBSP", func(r *Report) { r.Node = "a\u00a0b" }, `byte 1 is not printable`},
		{"node with C1 control", func(r *Report) { r.Node = "a\u0085" }, `byte 1 is not printable`},
		{"node not UTF-8", func(r *Report) { r.Node = "a\xff" }, "byte 1 is not printable"},
		{"node UTF-8", func(r *Report) { r.Node = "café-1" }, ""},
		{"service at bound", func(r *Report) { r.Entries[0].Service = long(MaxServiceBytes) }, ""},
		{"service one past", func(r *Report) { r.Entries[0].Service = long(MaxServiceBytes + 1) }, "entries[0]: invalid outlier report: service: 513 bytes, at most 512"},
		{"endpoint no port", func(r *Report) { r.Entries[0].Endpoint = "10.0.0.9" }, `endpoint "10.0.0.9": want host:port`},
		{"endpoint port 0", func(r *Report) { r.Entries[0].Endpoint = "10.0.0.9:0" }, `port "0": want 1..65535`},
		{"endpoint port 65536", func(r *Report) { r.Entries[0].Endpoint = "10.0.0.9:65536" }, `port "65536"`},
		{"endpoint port 08", func(r *Report) { r.Entries[0].Endpoint = "10.0.0.9:08" }, `port "08"`},
		{"endpoint no host", func(r *Report) { r.Entries[0].Endpoint = ":80" }, "empty host"},
		{"endpoint one past", func(r *Report) { r.Entries[0].Endpoint = long(MaxEndpointBytes-1) + ":1" }, "endpoint: 129 bytes, at most 128"},
		{"endpoint at bound", func(r *Report) { r.Entries[0].Endpoint = "z" + long(MaxEndpointBytes-3) + ":1" }, ""},
		{"detector 0", func(r *Report) { r.Entries[0].Detector = 0 }, "detector: 0 unknown"},
		{"detector 8", func(r *Report) { r.Entries[0].Detector = 8 }, "detector: 8 unknown"},
		{"age negative", func(r *Report) { r.Entries[0].Age = -1 }, "age: -1ns outside"},
		{"age at bound", func(r *Report) { r.Entries[0].Age = MaxAge }, ""},
		{"age one past", func(r *Report) { r.Entries[0].Age = MaxAge + time.Millisecond }, "age: 720h0m0.001s outside"},
		{"times 0", func(r *Report) { r.Entries[0].Times = 0 }, "times: 0 outside [1, 1048576]"},
		{"times at bound", func(r *Report) { r.Entries[0].Times = MaxTimes }, ""},
		{"times one past", func(r *Report) { r.Entries[0].Times = MaxTimes + 1 }, "times: 1048577 outside"},
		{"total below entries", func(r *Report) { r.Total = 2 }, "total: 2 is less than the 3 entries listed"},
		{"total at bound", func(r *Report) { r.Total = MaxTotal }, ""},
		{"total one past", func(r *Report) { r.Total = MaxTotal + 1 }, "total: 1048577, at most 1048576"},
		{"unsorted", func(r *Report) { r.Entries[1], r.Entries[2] = r.Entries[2], r.Entries[1] }, "entries[2]: outbound|9080||reviews.shop.svc.cluster.local 10.0.0.3:9080 is not after"},
		{"duplicate", func(r *Report) { r.Entries[2].Endpoint = r.Entries[1].Endpoint }, "is not after"},
		{"entries at bound", func(r *Report) { r.Entries, r.Total = entries(MaxEntries), MaxEntries }, ""},
		{"entries one past", func(r *Report) { r.Entries, r.Total = entries(MaxEntries+1), MaxEntries+1 }, "entries: 257, at most 256"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := sample()
			tc.edit(r)
			err := r.Validate()
			switch {
			case tc.want == "" && err != nil:
				t.Fatalf("want valid, got %v", err)
			case tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want) || !errors.Is(err, ErrInvalid)):
				t.Fatalf("got %v, want an ErrInvalid containing %q", err, tc.want)
			}
			// Encode refuses exactly what Validate refuses.
			_, eerr := Encode(r)
			if (eerr == nil) != (err == nil) {
				t.Fatalf("Encode: %v, Validate: %v", eerr, err)
			}
		})
	}
}

// entries are n distinct valid entries in order.
func entries(n int) []Entry {
	out := make([]Entry, n)
	for i := range out {
		out[i] = entry(svcA, fmt.Sprintf("h%05d:9080", i))
	}
	return out
}

// bigEntries are n distinct entries each with its own long service key, so the
// byte bound is reached before the entry bound.
func bigEntries(n int) []Entry {
	out := make([]Entry, n)
	for i := range out {
		out[i] = entry(fmt.Sprintf("outbound|80||%03d%s", i, strings.Repeat("s", MaxServiceBytes-16)), "10.0.0.1:80")
	}
	return out
}

func TestBytesBound(t *testing.T) {
	// 255 distinct services of ~512 bytes are ~128 KiB: past MaxReportBytes.
	r := &Report{Node: "n", Total: 255, Entries: bigEntries(255)}
	if _, err := Encode(r); err == nil || !strings.Contains(err.Error(), "at most 32768") {
		t.Fatalf("Encode of a %d-entry report of long services: %v, want the byte bound", len(r.Entries), err)
	}
	// Fit cuts it to what fits; find the largest report that encodes and check
	// the bound and one past it.
	f := Fit("n", r.Entries)
	b, err := Encode(&f)
	if err != nil {
		t.Fatalf("Fit's report does not encode: %v", err)
	}
	if !f.Truncated() || f.Total != 255 || len(b) > MaxReportBytes {
		t.Fatalf("Fit: %d entries of %d, %d bytes", len(f.Entries), f.Total, len(b))
	}
	one := Report{Node: "n", Total: 255, Entries: r.Entries[:len(f.Entries)+1]}
	if _, err := Encode(&one); err == nil {
		t.Errorf("Fit left out an entry that fits (%d entries)", len(one.Entries))
	}
	// A report of exactly MaxReportBytes encodes and decodes; one byte more
	// is refused by both. The last service's length is tuned to hit the bound.
	base := bigEntries(61)
	for l := 1; l <= MaxServiceBytes; l++ {
		exact := Report{Node: "n", Total: 62, Entries: append(base[:61:61], entry("z"+strings.Repeat("s", l-1), "10.0.0.1:80"))}
		b, err := Encode(&exact)
		if err != nil {
			t.Fatalf("no service length gives exactly %d bytes: %v", MaxReportBytes, err)
		}
		if len(b) < MaxReportBytes {
			continue
		}
		if len(b) != MaxReportBytes {
			t.Fatalf("service length %d gives %d bytes", l, len(b))
		}
		if _, err := Decode(b); err != nil {
			t.Fatalf("a report of exactly %d bytes does not decode: %v", len(b), err)
		}
		exact.Entries[61].Service += "s"
		if _, err := Encode(&exact); err == nil || !strings.Contains(err.Error(), "encoded report is 32769 bytes, at most 32768") {
			t.Errorf("one byte past the bound: Encode: %v", err)
		}
		if _, err := Decode(append(b, 0)); err == nil || !strings.Contains(err.Error(), "report is 32769 bytes, at most 32768") {
			t.Errorf("one byte past the bound: Decode: %v", err)
		}
		return
	}
	t.Fatal("never reached the byte bound")
}

func TestFit(t *testing.T) {
	in := []Entry{
		entry(svcA, "10.0.0.2:80"),
		entry(svcA, "10.0.0.1:80"),
		entry(svcA, "10.0.0.1:80"), // duplicate: left out
		entry(svcA, "bad"),         // invalid: left out
		{Service: svcB, Endpoint: "10.0.0.1:80", Detector: SuccessRate, Age: 1234567 * time.Microsecond, Times: 2},
	}
	got := Fit("n", in)
	want := Report{Node: "n", Total: 5, Entries: []Entry{
		{Service: svcB, Endpoint: "10.0.0.1:80", Detector: SuccessRate, Age: 1234 * time.Millisecond, Times: 2},
		entry(svcA, "10.0.0.1:80"), entry(svcA, "10.0.0.2:80"),
	}}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("Fit (-want +got):\n%s", diff)
	}
	if in[0].Endpoint != "10.0.0.2:80" {
		t.Error("Fit modified its input")
	}
	// Entry bound: MaxEntries+1 ejections give MaxEntries entries, Total says all.
	f := Fit("n", entries(MaxEntries+1))
	if len(f.Entries) != MaxEntries || f.Total != MaxEntries+1 || !f.Truncated() {
		t.Errorf("Fit of %d: %d entries, total %d", MaxEntries+1, len(f.Entries), f.Total)
	}
	if _, err := Encode(&f); err != nil {
		t.Error(err)
	}
	if f := Fit("n", entries(MaxEntries)); len(f.Entries) != MaxEntries || f.Truncated() {
		t.Errorf("Fit of %d: %d entries, truncated %v", MaxEntries, len(f.Entries), f.Truncated())
	}
}

// raw builds an encoding by hand, to feed Decode what Encode never writes.
type raw []byte

func (r raw) u(v uint64) raw               { return binary.AppendUvarint(r, v) }
func (r raw) s(s string) raw               { return append(r.u(uint64(len(s))), s...) }
func (r raw) b(c ...byte) raw              { return append(r, c...) }
func header(node string, total uint64) raw { return raw{Version}.s(node).u(total) }

func TestDecodeStrict(t *testing.T) {
	good := header("n", 1).u(1).s(svcA).u(1).u(0).s("10.0.0.1:80").b(1).u(5).u(1)
	if r, err := Decode(good); err != nil || r.Entries[0].Age != 5*time.Millisecond {
		t.Fatalf("the hand-built report does not decode: %+v %v", r, err)
	}
	for _, tc := range []struct {
		name string
		in   []byte
		want string
	}{
		{"empty", nil, "version: truncated"},
		{"version 2", raw{2}, "version 2: want 1"},
		{"trailing byte", good.b(0), "1 bytes after the last entry"},
		{"truncated", good[:len(good)-1], "times: truncated"},
		{"non-minimal uvarint", raw{Version}.b(0x81, 0x00).b('n'), "node length: 1 encoded in 2 bytes, not minimally"},
		{"overflow", raw{Version}.b(0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x01), "overflows 64 bits"},
		{"node length past bound", raw{Version}.u(MaxNodeBytes + 1), "node length: 257, at most 256"},
		{"node length past data", raw{Version}.u(5).b('n'), "node: truncated (5 bytes announced, 1 left)"},
		{"services past bound", header("n", 0).u(MaxEntries + 1), "number of services: 257, at most 256"},
		{"entries past bound", header("n", 0).u(0).u(MaxEntries + 1), "number of entries: 257, at most 256"},
		{"services unsorted", header("n", 2).u(2).s(svcA).s(svcB), "services[1]"},
		{"service unused", header("n", 0).u(1).s(svcA).u(0), `services[0] "outbound|9080||reviews.shop.svc.cluster.local": no entry uses it`},
		{"index past table", header("n", 1).u(1).s(svcA).u(1).u(1), "service index: 1, at most 0"},
		{"no services", header("n", 1).u(0).u(1).u(0).s("10.0.0.1:80").b(1).u(5).u(1), "entries[0]: no services listed"},
		{"detector 0", header("n", 1).u(1).s(svcA).u(1).u(0).s("10.0.0.1:80").b(0).u(5).u(1), "detector: 0 unknown"},
		{"age past bound", header("n", 1).u(1).s(svcA).u(1).u(0).s("10.0.0.1:80").b(1).u(uint64(MaxAge/time.Millisecond) + 1).u(1), "age: 2592000001, at most 2592000000"},
		{"total below entries", header("n", 0).u(1).s(svcA).u(1).u(0).s("10.0.0.1:80").b(1).u(5).u(1), "total: 0 is less than the 1 entries"},
		{"duplicate entries", header("n", 2).u(1).s(svcA).u(2).u(0).s("10.0.0.1:80").b(1).u(5).u(1).u(0).s("10.0.0.1:80").b(1).u(5).u(1), "entries[1]"},
		{"control byte", header("a\x00", 0).u(0).u(0), "byte 1 is not printable"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r, err := Decode(tc.in)
			if err == nil || !errors.Is(err, ErrInvalid) || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("Decode: %+v, %v; want an ErrInvalid containing %q", r, err, tc.want)
			}
		})
	}
}

func TestServiceKey(t *testing.T) {
	for in, want := range map[string]string{
		"outbound|9080|v1|reviews.shop.svc.cluster.local": "outbound|9080||reviews.shop.svc.cluster.local",
		"outbound|9080||reviews.shop.svc.cluster.local":   "outbound|9080||reviews.shop.svc.cluster.local",
		"inbound|80||":       "inbound|80||",
		"inbound|80|v1|x":    "inbound|80|v1|x",
		"outbound|80":        "outbound|80",
		"outbound|80|v1|a|b": "outbound|80|v1|a|b",
		"static":             "static",
	} {
		if got := ServiceKey(in); got != want {
			t.Errorf("ServiceKey(%q) = %q, want %q", in, got, want)
		}
	}
}

func FuzzDecode(f *testing.F) {
	b, _ := Encode(sample())
	f.Add(b)
	f.Add([]byte{Version, 1, 'n', 0, 0, 0})
	f.Fuzz(func(t *testing.T, in []byte) {
		r, err := Decode(in)
		if err != nil {
			return
		}
		// Whatever decodes re-encodes to exactly the same bytes.
		out, err := Encode(r)
		if err != nil {
			t.Fatalf("decoded report does not encode: %v", err)
		}
		if !bytes.Equal(in, out) {
			t.Fatalf("not canonical: %x re-encodes as %x", in, out)
		}
	})
}
