package httpproxy

import (
	"bufio"
	"bytes"
	"testing"
)

// BenchmarkParseHead measures the parser alone: a request head parsed and its
// fields written, then a response head, as one proxied exchange does; 0 allocs.
func BenchmarkParseHead(b *testing.B) {
	req := []byte("GET /bench HTTP/1.1\r\nHost: svc\r\nUser-Agent: bench\r\nAccept: */*\r\n\r\n")
	resp := []byte("HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nContent-Length: 1024\r\n\r\n")
	r := bytes.NewReader(nil)
	br := bufio.NewReaderSize(r, 4096)
	var m msg
	var out bytes.Buffer
	w := bufio.NewWriterSize(&out, 4096)
	b.ReportAllocs()
	for b.Loop() {
		r.Reset(req)
		br.Reset(r)
		if err := m.readHead(br, 65536, 128); err != nil {
			b.Fatal(err)
		}
		if err := m.parseRequestLine(8192); err != nil {
			b.Fatal(err)
		}
		out.Reset()
		w.Reset(&out)
		m.writeFields(w)
		r.Reset(resp)
		br.Reset(r)
		if err := m.readHead(br, 65536, 128); err != nil {
			b.Fatal(err)
		}
		if err := m.parseStatusLine(); err != nil {
			b.Fatal(err)
		}
		m.writeFields(w)
	}
}
