package httpproxy

import (
	"bufio"
	"bytes"
	"errors"
	"io"
	"strings"
	"testing"
)

// TestTrailerBound: a trailer section of exactly MaxTrailerBytes passes, one byte
// more is malformed; the limit is the same for every direction (one decoder).
func TestTrailerBound(t *testing.T) {
	trailers := func(n int) string {
		// "X-P: ...\r\n" lines then the final CRLF, n bytes in all.
		var b strings.Builder
		for left := n - 2; left > 0; {
			l := min(left, 1000)
			if left-l != 0 && left-l < 8 {
				l = left - 8 // keep room for one more well-formed line
			}
			b.WriteString("X-P: " + strings.Repeat("p", l-7) + "\r\n")
			left -= l
		}
		b.WriteString("\r\n")
		if b.Len() != n {
			t.Fatalf("built %d bytes, want %d", b.Len(), n)
		}
		return b.String()
	}
	for _, tc := range []struct {
		n  int
		ok bool
	}{{MaxTrailerBytes, true}, {MaxTrailerBytes + 1, false}} {
		body := "3\r\nabc\r\n0\r\n" + trailers(tc.n)
		var out bytes.Buffer
		w := bufio.NewWriter(&out)
		err := copyChunked(w, bufio.NewReaderSize(strings.NewReader(body), 16<<10))
		w.Flush()
		if (err == nil) != tc.ok || (err != nil && !errors.Is(err, errMalformed)) {
			t.Errorf("trailers of %d bytes: %v, want ok=%v", tc.n, err, tc.ok)
		}
		if tc.ok && out.String() != body {
			t.Errorf("trailers of %d bytes not forwarded as sent", tc.n)
		}
	}
}

// TestChunkLineBound: a chunk-size line of maxChunkLine bytes (CRLF included)
// passes, one byte more is malformed.
func TestChunkLineBound(t *testing.T) {
	for _, tc := range []struct {
		n  int
		ok bool
	}{{maxChunkLine, true}, {maxChunkLine + 1, false}} {
		line := "3;e=" + strings.Repeat("v", tc.n-len("3;e=\r\n")) + "\r\n"
		if _, err := parseChunkLine([]byte(line)); (err == nil) != tc.ok {
			t.Errorf("chunk line of %d bytes: %v, want ok=%v", len(line), err, tc.ok)
		}
	}
}

// TestParseChunkLine: RFC 9112 §7.1 chunk-size lines, extensions included.
func TestParseChunkLine(t *testing.T) {
	for _, tc := range []struct {
		line string
		size int64 // -1: malformed
	}{
		{"0\r\n", 0}, {"a\r\n", 10}, {"FF\r\n", 255}, {"fffffffffffffff\r\n", 1<<60 - 1},
		{"1;a\r\n", 1}, {"1;a=b\r\n", 1}, {"1 ; a = b ; c\r\n", 1}, {"1;a=\"x y\\\"z\"\r\n", 1}, {"1;a=\"\"\r\n", 1},
		{"1\t;a\r\n", 1},
		{"\r\n", -1}, {"1\n", -1}, {"1\r\r\n", -1}, {"1 \r\n", -1}, {"1;\r\n", -1}, {"1;=b\r\n", -1},
		{"1;a=\r\n", -1}, {"1;a b\r\n", -1}, {"1;a=\"x\r\n", -1}, {"1;a=\"x\\\r\n", -1}, {"1;a=b c\r\n", -1},
		{"1;a\x00\r\n", -1}, {"1;a=\"\x00\"\r\n", -1}, {"x\r\n", -1}, {"-1\r\n", -1}, {"+1\r\n", -1},
		{"0x1\r\n", -1}, {"1000000000000000\r\n", -1}, {";a\r\n", -1}, {"1,2\r\n", -1},
	} {
		n, err := parseChunkLine([]byte(tc.line))
		switch {
		case tc.size < 0 && !errors.Is(err, errMalformed):
			t.Errorf("%q: size %d err %v, want malformed", tc.line, n, err)
		case tc.size >= 0 && (err != nil || n != tc.size):
			t.Errorf("%q: size %d err %v, want %d", tc.line, n, err, tc.size)
		}
	}
}

// TestChunkedReaderAgrees: the bridge's decoding reader and copyChunked accept and
// refuse the same bodies, and the reader yields the content.
func TestChunkedReaderAgrees(t *testing.T) {
	for _, body := range []string{
		"5;a=b\r\nhello\r\n1\r\n!\r\n0\r\nX: y\r\n\r\n", "0\r\n\r\n",
		"5\nhello\r\n0\r\n\r\n", "5\r\nhelloX\r\n0\r\n\r\n", "5;\r\nhello\r\n0\r\n\r\n", "0\r\nNoColon\r\n\r\n", "5\r\nhel",
	} {
		w := bufio.NewWriter(&bytes.Buffer{})
		copyErr := copyChunked(w, bufio.NewReader(strings.NewReader(body)))
		got, readErr := io.ReadAll(&chunkedReader{r: bufio.NewReader(strings.NewReader(body))})
		if (copyErr == nil) != (readErr == nil) {
			t.Errorf("%q: copyChunked %v, chunkedReader %v", body, copyErr, readErr)
		}
		if readErr == nil && len(body) > 20 && string(got) != "hello!" {
			t.Errorf("%q: read %q", body, got)
		}
	}
}
