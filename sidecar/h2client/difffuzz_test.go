package h2client_test

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"golang.org/x/net/http2"
	"golang.org/x/net/http2/hpack"

	"github.com/weft-mesh/weft/sidecar/h2client"
)

// FuzzH2ClientDiff sends one request with this package's client and with
// net/http's HTTP/2 client (the bundled x/net/http2 Transport, through
// http.Transport.NewClientConn), each over net.Pipe to the same scripted
// server: it reads the request, then writes the same bytes to both, frames
// built from the fuzz input by genServer (SETTINGS, response HEADERS with
// CONTINUATION, DATA with padding, trailers, RST_STREAM, PING, GOAWAY,
// WINDOW_UPDATE, PUSH_PROMISE, unknown frames), then a PING whose ACK says the
// client processed them all. It fails when the two disagree on the response
// (status, header set, content length, body bytes, how the body ended,
// trailers, or RoundTrip's error class) or on what the client sent (its
// SETTINGS, the request's header set, body bytes and END_STREAM, RST_STREAM
// frames with their codes, SETTINGS and PING ACKs).
//
// Deliberate differences, not compared:
//   - user-agent: net/http adds "Go-http-client/2.0" when the request has
//     none; this client sends only what the request carries (a proxy passes
//     its client's fields through).
//   - GOAWAY from the client: on a connection error this client sends GOAWAY
//     with the error code before closing (RFC 9113 §5.4.1 SHOULD); net/http
//     closes without one.
//   - WINDOW_UPDATE frames: when credit is returned depends on how the body is
//     read (net/http and this client follow the same 4 KiB / half-window rule).
//   - A SETTINGS_INITIAL_WINDOW_SIZE that takes an open stream's send window
//     past 2^31-1 is a connection error FLOW_CONTROL_ERROR here (RFC 9113
//     §6.9.2); net/http accepts it.
//   - A frame on stream 1 after its END_STREAM: this client has forgotten the
//     stream (DATA's credit is returned, HEADERS ignored); net/http resets it
//     with PROTOCOL_ERROR or ignores it depending on whether its per-request
//     goroutine has cleaned up yet. The outcome for the response is the same;
//     the RST_STREAM it may send is not compared (rstAfterEnd below).
//   - After a complete response to a request whose body was still being sent,
//     this client stops the body and resets with NO_ERROR; net/http goes on
//     sending the body. genServer answers only after the whole request.
//   - After a GOAWAY, this client closes the connection as soon as no stream is
//     left on it (from its reader, at once), so a PING after the GOAWAY may go
//     unanswered; a stream the GOAWAY did not cover is failed without a
//     RST_STREAM (the server has closed it already). net/http resets such a
//     stream with CANCEL and closes a moment later, from the request's
//     goroutine. With a GOAWAY in the script, the client's PING ACKs and
//     CANCEL resets are not compared (afterGoAway).
//   - net/http writes a stream's RST_STREAM from the request's goroutine, a
//     moment after its reader found the stream error; when the connection
//     then ends (a connection error in a later frame) before the sync PING,
//     that reset may never go out. Outcomes where the connection ended before
//     the sync are compared without resets (unsynced).
//   - Error values differ (types and text); RoundTrip's and the body's errors
//     are compared by class (errClass).
func FuzzH2ClientDiff(f *testing.F) {
	// Seeds in genServer's encoding: byte 0 the request (0 GET, 1 HEAD, 2 POST
	// with a body), byte 1 flags (bit 0: no SETTINGS first), then ops: 0
	// HEADERS (status index, field count and fields, flags), 1 DATA (stream
	// choice, size, flags), 2 trailers, 3 RST_STREAM, 4 SETTINGS, 5 PING, 6
	// GOAWAY, 7 WINDOW_UPDATE, 8 PUSH_PROMISE, 9 an unknown frame.
	ok := []byte{0, 0, 0, 0, 1, 0, 3, 1, 0, 5, 1}
	for _, seed := range [][]byte{
		{0, 0},
		ok,
		{1, 0, 0, 0, 1, 0, 3, 1},          // HEAD
		{2, 0, 0, 0, 1, 0, 3, 1, 0, 5, 1}, // POST
		{0, 1, 0, 0, 0, 1},                // HEADERS before SETTINGS
		{0, 0, 0, 0, 2, 1, 2, 1, 0, 1, 0, 3, 0, 2, 2},                   // trailers
		{0, 0, 0, 0, 1, 1, 0, 0, 1, 0, 3, 1, 0},                         // content-length shorter than the body
		{0, 0, 0, 0, 1, 1, 9, 0},                                        // content-length longer than the body
		{0, 0, 0, 3, 0, 0, 0, 0, 1, 0},                                  // 1xx then 200
		{0, 0, 0, 0, 0, 0, 1, 0, 3, 1, 0, 3, 2},                         // reset mid-body
		{0, 0, 6, 0, 0},                                                 // GOAWAY before the answer
		{0, 0, 0, 0, 0, 0, 1, 0, 3, 0, 0, 7, 1, 200, 5, 0},              // window updates, PING
		{0, 0, 8, 0, 0, 0, 1},                                           // PUSH_PROMISE
		{0, 0, 4, 3, 4, 1, 0, 0, 1, 1},                                  // SETTINGS mid-stream
		{0, 0, 0, 5, 0, 1},                                              // a malformed :status
		{0, 0, 1, 0, 3, 0},                                              // DATA before HEADERS
		{0, 0, 0, 0, 0, 0, 1, 2, 3, 0, 9, 0, 1, 0, 3, 1},                // unknown frame, DATA after END_STREAM
		{0, 0, 0, 0, 12, 0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 1, 0x20}, // many fields, CONTINUATION
	} {
		f.Add(seed)
	}
	f.Fuzz(func(t *testing.T, in []byte) {
		sc := genServer(in)
		ours := runClientDiff(t, sc, clientOurs)
		var refs []string
		for range refereeRuns {
			ref := runClientDiff(t, sc, clientStd)
			if ref == ours || sc.goAway && afterGoAway(ref) == afterGoAway(ours) || unsynced(ref) && unsynced(ours) && withoutResets(ref) == withoutResets(ours) {
				return
			}
			refs = append(refs, ref)
		}
		t.Fatalf("this client and net/http's disagree on input %x\nours:\n%s\nnet/http (each run):\n%s", in, ours, strings.Join(refs, "\n--\n"))
	})
}

// refereeRuns bounds the net/http runs compared with one of ours (its
// per-request goroutine makes a few outcomes timing-dependent).
const refereeRuns = 3

const (
	diffTimeout = 5 * time.Second
	diffHost    = "svc.test:9080"
)

var syncPing = [8]byte{'w', 'e', 'f', 't', 's', 'y', 'n', 'c'}

// script is a request and the server's bytes after it.
type script struct {
	method     string
	body       string
	noSettings bool
	goAway     bool // the frames have a GOAWAY
	frames     []byte
}

// genServer decodes a fuzz input into a script (any input is one).
func genServer(in []byte) script {
	next := func() byte {
		if len(in) == 0 {
			return 0
		}
		b := in[0]
		in = in[1:]
		return b
	}
	var sc script
	switch next() % 3 {
	case 0:
		sc.method = "GET"
	case 1:
		sc.method = "HEAD"
	default:
		sc.method, sc.body = "POST", "hello"
	}
	sc.noSettings = next()&1 == 1
	var buf bytes.Buffer
	fr := http2.NewFramer(&buf, nil)
	fr.AllowIllegalWrites = true
	var hbuf bytes.Buffer
	enc := hpack.NewEncoder(&hbuf)
	streamOf := func(b byte) uint32 { return []uint32{1, 1, 3, 0}[b%4] }
	statuses := []string{"200", "204", "404", "103", "", "abc", "503", "100"}
	names := []string{"content-length", "trailer", "x-a", "content-type", "grpc-status", "Upper", "connection", "x-b", "set-cookie", "date", "x-long", "x-c"}
	values := []string{"0", "1", "5", "x-t", "text/plain", "a\x00b", "close", "2", "k=v", strings.Repeat("v", 300), "", "9"}
	writeBlock := func(id uint32, flags byte) {
		block := hbuf.Bytes()
		end := flags&1 == 1
		if flags&0x20 != 0 && len(block) > 1 { // split into CONTINUATION
			half := len(block) / 2
			fr.WriteHeaders(http2.HeadersFrameParam{StreamID: id, BlockFragment: block[:half], EndStream: end})
			fr.WriteContinuation(id, true, block[half:])
		} else {
			fr.WriteHeaders(http2.HeadersFrameParam{StreamID: id, BlockFragment: block, EndStream: end, EndHeaders: true})
		}
		hbuf.Reset()
	}
	for ops := 0; len(in) > 0 && ops < 32; ops++ {
		switch next() % 10 {
		case 0: // HEADERS: status, fields, flags
			if s := statuses[next()%byte(len(statuses))]; s != "" {
				enc.WriteField(hpack.HeaderField{Name: ":status", Value: s})
			}
			for n := next() % 13; n > 0; n-- {
				i := next()
				enc.WriteField(hpack.HeaderField{Name: names[i%byte(len(names))], Value: values[(i/16)%byte(len(values))]})
			}
			writeBlock(1, next())
		case 1: // DATA
			id := streamOf(next())
			size := int(next()) % 40
			flags := next()
			data := bytes.Repeat([]byte{'d'}, size)
			if flags&8 != 0 {
				fr.WriteDataPadded(id, flags&1 == 1, data, make([]byte, 3))
			} else {
				fr.WriteData(id, flags&1 == 1, data)
			}
		case 2: // trailers
			for n := next() % 4; n > 0; n-- {
				i := next()
				enc.WriteField(hpack.HeaderField{Name: names[i%byte(len(names))], Value: values[(i/16)%byte(len(values))]})
			}
			flags := next()
			if flags&2 != 0 {
				enc.WriteField(hpack.HeaderField{Name: ":status", Value: "200"})
			}
			writeBlock(1, flags|1&^(flags>>2&1))
		case 3:
			fr.WriteRSTStream(streamOf(next()), http2.ErrCode(next()%14))
		case 4: // SETTINGS: id, value
			id := http2.SettingID(next()%7 + 1)
			v := uint32(next())
			switch id {
			case http2.SettingInitialWindowSize:
				v = v << 8
			case http2.SettingMaxFrameSize:
				v = 16<<10 + v
			}
			fr.WriteSettings(http2.Setting{ID: id, Val: v})
		case 5:
			fr.WritePing(next()&1 == 1, [8]byte{1, 2, 3})
		case 6:
			sc.goAway = true
			fr.WriteGoAway(uint32(next()%3), http2.ErrCode(next()%3), nil)
		case 7:
			fr.WriteWindowUpdate(streamOf(next()), uint32(next())+1)
		case 8:
			fr.WritePushPromise(http2.PushPromiseParam{StreamID: 1, PromiseID: 2, EndHeaders: true, BlockFragment: []byte{0x82}})
		case 9:
			fr.WriteRawFrame(0x42, 0, 1, []byte{1, 2})
		}
	}
	sc.frames = buf.Bytes()
	return sc
}

// client is one HTTP/2 client on a connection.
type client interface {
	RoundTrip(*http.Request) (*http.Response, error)
	Close() error
}

func clientOurs(nc net.Conn) (client, error) { return h2client.New(nc, h2client.Config{}) }

func clientStd(nc net.Conn) (client, error) {
	var p http.Protocols
	p.SetUnencryptedHTTP2(true)
	tr := &http.Transport{Protocols: &p, DisableCompression: true, HTTP2: &http.HTTP2Config{MaxReadFrameSize: h2client.DefaultMaxReadFrameSize},
		DialContext: func(context.Context, string, string) (net.Conn, error) { return nc, nil }}
	return tr.NewClientConn(context.Background(), "http", diffHost)
}

// serverLog is what the scripted server saw from the client.
type serverLog struct {
	settings  string
	request   []string
	body      []byte
	endStream bool
	acks      int // SETTINGS ACKs
	pings     int // PING ACKs other than the sync's
	resets    []string
	synced    bool // the sync PING was answered
}

// runClientDiff runs sc against one client and describes the outcome.
func runClientDiff(t *testing.T, sc script, newClient func(net.Conn) (client, error)) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	cn, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	sn, err := ln.Accept()
	if err != nil {
		t.Fatal(err)
	}
	defer sn.Close()
	logc := make(chan serverLog, 1)
	half := make(chan struct{})
	go serve(sn.(*net.TCPConn), sc, half, logc)
	c, err := newClient(cn)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), diffTimeout)
	defer cancel()
	var body io.Reader
	if sc.body != "" {
		body = strings.NewReader(sc.body)
	}
	req, _ := http.NewRequestWithContext(ctx, sc.method, "http://"+diffHost+"/p?q=1", body)
	req.Header.Set("X-Req", "1")
	req.Header["User-Agent"] = []string{""} // net/http's default is a deliberate difference
	// The server half-closes after the sync PING's ACK: a RoundTrip or a body
	// still waiting then ends with the connection.
	var out strings.Builder
	resp, err := c.RoundTrip(req)
	<-half // every frame was processed (or the connection ended): the body's state is settled
	if err != nil {
		fmt.Fprintf(&out, "roundtrip error %s\n", errClass(err))
	} else {
		fmt.Fprintf(&out, "status %d %q proto %s\ncontent-length %d\n", resp.StatusCode, resp.Status, resp.Proto, resp.ContentLength)
		out.WriteString(fieldsOf("header", resp.Header))
		b, err := io.ReadAll(resp.Body)
		sum := sha256.Sum256(b)
		fmt.Fprintf(&out, "body %d bytes %x, end %s\n", len(b), sum[:4], errClass(err))
		resp.Body.Close()
		out.WriteString(fieldsOf("trailer", resp.Trailer))
	}
	c.Close()
	sl := <-logc
	fmt.Fprintf(&out, "client sent: settings %s\nrequest %s\nbody %q end %v\nsettings acks %d, ping acks %d, resets %v, synced %v\n",
		sl.settings, strings.Join(sl.request, " "), sl.body, sl.endStream, sl.acks, sl.pings, sl.resets, sl.synced)
	return out.String()
}

var (
	pingAcksRE    = regexp.MustCompile(`ping acks \d+, `)
	cancelResetRE = regexp.MustCompile(`\d+:CANCEL ?`)
	syncedRE      = regexp.MustCompile(`synced (true|false)`)
)

// afterGoAway is an outcome without what a GOAWAY makes the clients do
// differently (FuzzH2ClientDiff's list).
func afterGoAway(outcome string) string {
	outcome = pingAcksRE.ReplaceAllString(outcome, "")
	outcome = cancelResetRE.ReplaceAllString(outcome, "")
	return syncedRE.ReplaceAllString(outcome, "")
}

var resetsRE = regexp.MustCompile(`resets \[[^]]*\]`)

// unsynced: the connection of outcome ended before the sync PING's answer.
func unsynced(outcome string) bool { return strings.Contains(outcome, "synced false") }

func withoutResets(outcome string) string { return resetsRE.ReplaceAllString(outcome, "") }

func fieldsOf(what string, h http.Header) string {
	var lines []string
	for k, vv := range h {
		lines = append(lines, fmt.Sprintf("%s %s: %q", what, k, vv))
	}
	slices.Sort(lines)
	return strings.Join(lines, "\n") + "\n"
}

var streamErrRE = regexp.MustCompile(`stream error: stream ID \d+; ([A-Z_]+)`)

// errClass names an error's kind, alike for both clients' values.
func errClass(err error) string {
	switch {
	case err == nil:
		return "ok"
	case errors.Is(err, io.ErrUnexpectedEOF), errors.Is(err, io.EOF):
		return "unexpected-eof"
	case errors.Is(err, context.DeadlineExceeded):
		return "timeout"
	case strings.Contains(err.Error(), "more than declared Content-Length"), strings.Contains(err.Error(), "more than its declared content-length"):
		return "too-long"
	}
	if m := streamErrRE.FindStringSubmatch(err.Error()); m != nil {
		return "stream " + m[1]
	}
	return "failed"
}

// serve is the scripted server: preface, SETTINGS (unless the script says
// not), the request read, the script's frames, the sync PING; it logs what
// the client sends until the client closes.
func serve(nc *net.TCPConn, sc script, half chan<- struct{}, logc chan<- serverLog) {
	var sl serverLog
	gotRequest := make(chan struct{})
	gotSync := make(chan struct{})
	readDone := make(chan struct{})
	go func() {
		defer close(readDone)
		pre := make([]byte, len("PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"))
		if _, err := io.ReadFull(nc, pre); err != nil {
			return
		}
		fr := http2.NewFramer(nil, nc)
		fr.ReadMetaHeaders = hpack.NewDecoder(4096, nil)
		fr.MaxHeaderListSize = 1 << 20
		requested, syncedOnce := false, false
		for {
			f, err := fr.ReadFrame()
			if err != nil {
				return
			}
			switch f := f.(type) {
			case *http2.SettingsFrame:
				if f.IsAck() {
					sl.acks++
					continue
				}
				var s []string
				f.ForeachSetting(func(x http2.Setting) error { s = append(s, x.String()); return nil })
				sl.settings = strings.Join(s, ",")
			case *http2.MetaHeadersFrame:
				for _, hf := range f.Fields {
					if hf.Name != "user-agent" {
						sl.request = append(sl.request, hf.Name+"="+hf.Value)
					}
				}
				slices.Sort(sl.request)
				if f.StreamEnded() {
					sl.endStream = true
				}
			case *http2.DataFrame:
				sl.body = append(sl.body, f.Data()...)
				if f.StreamEnded() {
					sl.endStream = true
				}
			case *http2.RSTStreamFrame:
				sl.resets = append(sl.resets, fmt.Sprintf("%d:%v", f.StreamID, f.ErrCode))
			case *http2.PingFrame:
				if f.IsAck() && f.Data == syncPing {
					if !syncedOnce {
						syncedOnce = true
						sl.synced = true
						close(gotSync)
					}
				} else if f.IsAck() {
					sl.pings++
				}
			}
			if !requested && sl.endStream {
				requested = true
				close(gotRequest)
			}
		}
	}()
	defer func() {
		nc.CloseWrite()
		close(half)
		<-readDone
		logc <- sl
	}()
	if !sc.noSettings {
		if _, err := nc.Write(settingsFrame()); err != nil {
			return
		}
	}
	select {
	case <-gotRequest:
	case <-readDone:
		return
	case <-time.After(diffTimeout):
		return
	}
	if _, err := nc.Write(sc.frames); err != nil {
		return
	}
	var ping bytes.Buffer
	http2.NewFramer(&ping, nil).WritePing(false, syncPing)
	if _, err := nc.Write(ping.Bytes()); err != nil {
		return
	}
	select {
	case <-gotSync:
	case <-readDone:
	case <-time.After(diffTimeout):
	}
}

// settingsFrame is the server's first SETTINGS: 100 streams.
func settingsFrame() []byte {
	b := make([]byte, 9+6)
	b[2] = 6
	b[3] = byte(http2.FrameSettings)
	binary.BigEndian.PutUint16(b[9:], uint16(http2.SettingMaxConcurrentStreams))
	binary.BigEndian.PutUint32(b[11:], 100)
	return b
}
