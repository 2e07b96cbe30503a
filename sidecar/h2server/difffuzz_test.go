package h2server

import (
	"bytes"
	"context"
	"encoding/binary"
	"fmt"
	"io"
	"log"
	"net"
	"net/http"
	"runtime"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"golang.org/x/net/http2"
	"golang.org/x/net/http2/hpack"

	"github.com/weft-mesh/weft/tools/testkit"
)

// FuzzH2ServerDiff feeds the same client byte stream (the preface, then frames
// built from the fuzz input by genFrames, so deep states are reached) to this
// package's server and to x/net/http2's Server, each behind the same handler,
// and fails when they disagree on the requests delivered to the handler
// (method, authority, path, header set, content length, body bytes, whether
// the body ended cleanly, trailers) or on how the connection ended (the
// GOAWAY error code, and whether a PING sent after the input was answered).
//
// Deliberate differences, not compared:
//   - A request with a connection-specific field, or TE other than "trailers":
//     x/net/http2 answers 400 itself, this server resets the stream (RFC 9113
//     §8.2.2). Neither delivers it.
//   - A stream over SETTINGS_MAX_CONCURRENT_STREAMS: x/net/http2 resets it with
//     PROTOCOL_ERROR once its SETTINGS were acknowledged, this server always
//     with REFUSED_STREAM (safe for the client to retry). Neither delivers it;
//     genFrames stays under the bound (which unit tests cover), as the bound
//     counts streams whose end x/net/http2 notes asynchronously.
//   - A request body that ends shorter than its content-length: both fail the
//     body; this server also resets the stream (x/net/http2 leaves it open).
//   - Response-side behaviour (headers the server adds, such as Date, and
//     content sniffing, which this server does not do) is not compared: the
//     handler under test is a proxy that copies its upstream's.
//
// x/net/http2 is itself not deterministic in one place: a frame on a stream it
// has just reset is ignored, or treated as on a closed stream (a HEADERS then
// is a connection error), depending on whether its RST_STREAM write finished
// first (under load, often it has). This server always ignores such frames
// (MaxRecentResets); so x/net/http2's outcome is also accepted when it is this
// server's with that memory off (Config.forgetResets), and the referee runs up
// to refereeRuns times.
func FuzzH2ServerDiff(f *testing.F) {
	// Seeds, in genFrames's encoding: op 0 is a request's HEADERS (then: id
	// choice, pseudo-field selection bits, method, scheme, authority, path
	// indexes, field count and fields, flags), op 1 DATA (stream choice, size,
	// scale, flags), op 2 trailers.
	get := []byte{0, 0, 0x0f, 0, 0, 0, 0, 0, 1}
	post := []byte{0, 0, 0x0f, 1, 0, 0, 1, 1, 0, 0, 1, 1, 0, 5, 1, 1}
	trailers := []byte{0, 0, 0x0f, 1, 0, 0, 0, 1, 8, 0, 1, 1, 0, 3, 1, 0, 2, 1, 0, 1, 19, 1, 0}
	for _, seed := range [][]byte{
		{},
		get, post, trailers,
		append(append([]byte{}, get...), get...),                     // two requests
		append([]byte{5, 1, 3, 1, 2, 3, 5}, get...),                  // SETTINGS first
		append(append([]byte{}, post[:10]...), 4, 1, 1, 0, 8),        // reset mid-body
		{0, 0, 0x0f, 0, 0, 0, 0, 2, 16, 16, 0x11},                    // a long header list, CONTINUATION
		{0, 0, 0x0f, 0, 0, 0, 0, 3, 5, 6, 7, 1},                      // connection-specific fields
		{0, 0, 0x2f, 0, 0, 0, 0, 1, 13, 1},                           // pseudo after regular
		{0, 0, 0x1f, 0, 0, 0, 0, 0, 0, 1},                            // an extra pseudo-field
		{0, 0, 0x0f, 1, 0, 0, 0, 1, 0, 0, 1, 1, 0, 9, 1, 1},          // longer than content-length
		{0, 0, 0x0f, 0, 0, 0, 0, 0, 1, 0, 5, 0x0f, 0, 0, 0, 0, 0, 1}, // HEADERS reusing an id
		{9, 0},                      // stray CONTINUATION
		{3, 1, 0, 2, 3, 1, 1, 6, 1}, // window updates, PING
		{0, 0, 0x0f, 0, 0, 0, 0, 0, 0x65, 3, 1, 0, 4}, // padding, priority on itself
	} {
		f.Add(seed)
	}
	f.Fuzz(func(t *testing.T, in []byte) {
		stream := genFrames(in)
		ours := runDiff(t, stream, serveOurs)
		var refs []string
		oursForgetting := ""
		for range refereeRuns {
			ref := runDiff(t, stream, serveXNet)
			if ref == ours {
				return
			}
			if oursForgetting == "" {
				oursForgetting = runDiff(t, stream, serveOursForgetting)
			}
			if ref == oursForgetting {
				return
			}
			refs = append(refs, ref)
		}
		t.Fatalf("this server and x/net/http2's disagree on input %x\nours:\n%s\nours without MaxRecentResets:\n%s\nx/net/http2 (each run):\n%s",
			in, ours, oursForgetting, strings.Join(refs, "\n--\n"))
	})
}

// refereeRuns bounds the x/net/http2 runs compared with one of ours.
const refereeRuns = 3

// Settings both servers run with. The header list bound is small enough for
// genFrames to pass it (x/net/http2 advertises MaxHeaderBytes plus ten fields'
// 32-byte overhead).
const (
	diffMaxHeaderBytes = 4 << 10
	diffMaxStreams     = 100
	diffMaxFrames      = 64
	diffMaxData        = 256 << 10 // under both receive windows: no window depends on timing
)

// syncTimeout bounds the wait for syncPing's answer (or the connection's end).
const syncTimeout = 2 * time.Second

// syncPing is the PING sent after the input: its ACK says every frame before
// it was processed.
var syncPing = [8]byte{'w', 'e', 'f', 't', 's', 'y', 'n', 'c'}

type serveFunc func(c net.Conn, h http.Handler)

func serveOurs(c net.Conn, h http.Handler) { serveOursWith(c, h, false) }

func serveOursForgetting(c net.Conn, h http.Handler) { serveOursWith(c, h, true) }

func serveOursWith(c net.Conn, h http.Handler, forgetResets bool) {
	s, err := New(Config{Handler: h, MaxConcurrentStreams: diffMaxStreams, MaxHeaderListSize: diffMaxHeaderBytes + 10*32,
		forgetResets: forgetResets})
	if err != nil {
		panic(err)
	}
	s.ServeConn(context.Background(), c, nil)
	s.Close()
}

// serveXNet serves c with x/net/http2's Server, the one this package's request
// validation follows. (net/http's bundled copy in Go 1.26 is older: it does not
// check :authority against Host, nor its characters.)
func serveXNet(c net.Conn, h http.Handler) {
	//lint:ignore SA1019 x/net/http2's own Server is the referee here, deprecated or not
	s := &http2.Server{MaxConcurrentStreams: diffMaxStreams, MaxReadFrameSize: DefaultMaxReadFrameSize}
	//lint:ignore SA1019 as above
	s.MaxUploadBufferPerConnection = DefaultWindow
	//lint:ignore SA1019 as above
	s.MaxUploadBufferPerStream = DefaultWindow
	//lint:ignore SA1019 as above
	s.ServeConn(c, &http2.ServeConnOpts{Handler: h, BaseConfig: &http.Server{MaxHeaderBytes: diffMaxHeaderBytes,
		ErrorLog: log.New(io.Discard, "", 0)}})
}

// runDiff serves stream on one server and describes what its handler saw and
// how the connection ended.
func runDiff(t *testing.T, stream []byte, serve serveFunc) string {
	baseline := runtime.NumGoroutine()
	cc, sc := net.Pipe()
	var mu sync.Mutex
	var reqs []string
	release := make(chan struct{})
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, err := io.ReadAll(r.Body)
		rec := describe(r, body, err == nil)
		mu.Lock()
		reqs = append(reqs, rec)
		mu.Unlock()
		<-release
		_, _ = io.WriteString(w, "ok")
	})
	served := make(chan struct{})
	go func() { defer close(served); serve(sc, h) }()

	var goAway, synced string
	var readerDone sync.WaitGroup
	syncCh := make(chan struct{}, 1)
	readerDone.Add(1)
	go func() {
		defer readerDone.Done()
		fr := http2.NewFramer(io.Discard, cc)
		fr.SetMaxReadFrameSize(1 << 24)
		for {
			f, err := fr.ReadFrame()
			if err != nil {
				select {
				case syncCh <- struct{}{}:
				default:
				}
				return
			}
			switch f := f.(type) {
			case *http2.GoAwayFrame:
				mu.Lock()
				if goAway == "" && f.ErrCode != http2.ErrCodeNo {
					goAway = f.ErrCode.String()
				}
				mu.Unlock()
				if f.ErrCode != http2.ErrCodeNo {
					select {
					case syncCh <- struct{}{}:
					default:
					}
				}
			case *http2.PingFrame:
				if f.IsAck() && f.Data == syncPing {
					mu.Lock()
					synced = "answered"
					mu.Unlock()
					select {
					case syncCh <- struct{}{}:
					default:
					}
				}
			}
		}
	}()
	go func() {
		var ping bytes.Buffer
		_ = http2.NewFramer(&ping, nil).WritePing(false, syncPing)
		_, _ = cc.Write(stream)
		_, _ = cc.Write(ping.Bytes())
	}()
	select {
	case <-syncCh:
	case <-time.After(syncTimeout):
		mu.Lock()
		synced = "timed out"
		mu.Unlock()
	}
	close(release)
	cc.Close()
	<-served
	readerDone.Wait()
	// x/net/http2's ServeConn returns before its handlers do: the run is over
	// when every goroutine it started has ended.
	if err := testkit.Poll(5*time.Second, func() error {
		if n := runtime.NumGoroutine(); n > baseline {
			return fmt.Errorf("%d goroutines, %d before the run", n, baseline)
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	mu.Lock() // the handlers are done, but only mu says so to the race detector
	defer mu.Unlock()
	sort.Strings(reqs)
	return fmt.Sprintf("goaway=%q ping=%q\n%s", goAway, synced, strings.Join(reqs, "\n"))
}

// describe is what is compared of one delivered request.
func describe(r *http.Request, body []byte, clean bool) string {
	var hs []string
	for k, vv := range r.Header {
		for _, v := range vv {
			hs = append(hs, k+": "+v)
		}
	}
	sort.Strings(hs)
	var ts []string
	for k, vv := range r.Trailer {
		ts = append(ts, fmt.Sprintf("%s: %q", k, vv))
	}
	sort.Strings(ts)
	return fmt.Sprintf("%s %q %q cl=%d body=%q clean=%v headers=%q trailers=%q",
		r.Method, r.Host, r.RequestURI, r.ContentLength, body, clean, hs, ts)
}

// fuzzInput hands out the fuzz input a byte at a time (0 past its end).
type fuzzInput struct {
	b []byte
	i int
}

func (in *fuzzInput) next() byte {
	if in.i >= len(in.b) {
		return 0
	}
	in.i++
	return in.b[in.i-1]
}

func (in *fuzzInput) done() bool { return in.i >= len(in.b) }

func (in *fuzzInput) pick(choices []string) string { return choices[int(in.next())%len(choices)] }

var (
	fuzzMethods     = []string{"GET", "POST", "HEAD", "CONNECT", "", "PUT"}
	fuzzSchemes     = []string{"http", "https", "ftp", ""}
	fuzzAuthorities = []string{"h", "a@b", "ex.com:80", "bad host", "", "[::1]:8080"}
	fuzzPaths       = []string{"/", "/a?b=c", "*", "x", "/%zz", "", "/p/../q", "//double"}
	fuzzFields      = [][2]string{
		{"content-length", "5"}, {"content-length", "0"}, {"content-length", "x"}, {"host", "h"},
		{"host", "other"}, {"connection", "close"}, {"te", "trailers"}, {"te", "gzip"}, {"trailer", "x-t"},
		{"trailer", "x-t, content-length"}, {"cookie", "a=1"}, {"cookie", "b=2"}, {"expect", "100-continue"},
		{"x-a", "1"}, {"X-Upper", "v"}, {"x-bad", "a\x00b"}, {"x-long", strings.Repeat("v", 3000)},
		{"keep-alive", "1"}, {"user-agent", "fuzz"}, {"x-t", "tv"}, {":path", "/late"}, {"x-a", "2"},
		{"upgrade", "h2c"}, {"transfer-encoding", "chunked"}, {"host", ""}, {"content-length", "1"},
	}
	fuzzSettings = []http2.SettingID{http2.SettingHeaderTableSize, http2.SettingEnablePush, http2.SettingMaxConcurrentStreams,
		http2.SettingInitialWindowSize, http2.SettingMaxFrameSize, http2.SettingMaxHeaderListSize,
		http2.SettingEnableConnectProtocol, http2.SettingNoRFC7540Priorities, 0x10, 0}
	fuzzSettingVals = []uint32{0, 1, 2, 100, 4096, 16384, 65535, 1 << 20, 1<<24 - 1, 1 << 31, 1<<31 - 1}
	fuzzIncrements  = []uint32{0, 1, 1000, 65535, 1<<31 - 1}
)

// genFrames turns fuzz input into a client byte stream: the preface, a SETTINGS
// frame, then up to diffMaxFrames frames each chosen and shaped by the input.
// Frames are built with x/net/http2's Framer (illegal ones allowed) and one
// HPACK encoder, so both servers decode the same header blocks.
func genFrames(b []byte) []byte {
	in := &fuzzInput{b: b}
	var out bytes.Buffer
	out.WriteString(clientPreface)
	fr := http2.NewFramer(&out, nil)
	fr.AllowIllegalWrites = true
	var hbuf bytes.Buffer
	enc := hpack.NewEncoder(&hbuf)
	_ = fr.WriteSettings()
	var ids []uint32
	nextID, data := uint32(1), 0
	stream := func() uint32 {
		if len(ids) == 0 || in.next()%8 == 0 {
			return uint32(in.next() % 8)
		}
		return ids[int(in.next())%len(ids)]
	}
	block := func(fields [][2]string) []byte {
		hbuf.Reset()
		for _, kv := range fields {
			_ = enc.WriteField(hpack.HeaderField{Name: kv[0], Value: kv[1]})
		}
		return bytes.Clone(hbuf.Bytes())
	}
	writeBlock := func(id uint32, blk []byte, flags byte) {
		split := flags&0x10 != 0 && len(blk) > 1
		frag := blk
		if split {
			frag = blk[:len(blk)/2]
		}
		p := http2.HeadersFrameParam{StreamID: id, BlockFragment: frag, EndStream: flags&1 != 0, EndHeaders: !split}
		if flags&0x20 != 0 {
			p.PadLength = flags & 0x0f
		}
		if flags&0x40 != 0 {
			p.Priority = http2.PriorityParam{StreamDep: uint32(flags&0x3) * id, Weight: 15}
		}
		_ = fr.WriteHeaders(p)
		if split {
			_ = fr.WriteContinuation(id, true, blk[len(blk)/2:])
		}
	}
	for n := 0; n < diffMaxFrames && !in.done(); n++ {
		switch in.next() % 12 {
		case 0: // a request's HEADERS
			var id uint32
			switch c := in.next() % 8; {
			case c < 5:
				id = nextID
				nextID += 2
			case c == 5:
				id = nextID - 2
			case c == 6:
				id = 2
			default:
				id = 1
			}
			if len(ids) < diffMaxStreams/2 {
				ids = append(ids, id)
			}
			sel := in.next()
			var pseudo, regular [][2]string
			if sel&1 != 0 {
				pseudo = append(pseudo, [2]string{":method", in.pick(fuzzMethods)})
			}
			if sel&2 != 0 {
				pseudo = append(pseudo, [2]string{":scheme", in.pick(fuzzSchemes)})
			}
			if sel&4 != 0 {
				pseudo = append(pseudo, [2]string{":authority", in.pick(fuzzAuthorities)})
			}
			if sel&8 != 0 {
				pseudo = append(pseudo, [2]string{":path", in.pick(fuzzPaths)})
			}
			if sel&0x10 != 0 {
				pseudo = append(pseudo, [2]string{in.pick([]string{":protocol", ":status", ":foo", ":method"}), "x"})
			}
			for range int(in.next() % 5) {
				regular = append(regular, fuzzFields[int(in.next())%len(fuzzFields)])
			}
			fields := append(pseudo, regular...)
			if sel&0x20 != 0 && len(regular) > 0 && len(pseudo) > 0 {
				fields = append(regular, pseudo...) // pseudo-fields after regular ones
			}
			writeBlock(id, block(fields), in.next())
		case 1: // DATA
			id := stream()
			size := int(in.next())
			if in.next()%4 == 0 {
				size *= 65
			}
			size = min(size, diffMaxData-data)
			data += size
			flags := in.next()
			body := bytes.Repeat([]byte{'d'}, size)
			if flags&2 != 0 {
				_ = fr.WriteDataPadded(id, flags&1 != 0, body, make([]byte, flags>>4))
			} else {
				_ = fr.WriteData(id, flags&1 != 0, body)
			}
		case 2: // trailers
			id := stream()
			var fields [][2]string
			for range int(in.next() % 3) {
				fields = append(fields, fuzzFields[int(in.next())%len(fuzzFields)])
			}
			writeBlock(id, block(fields), in.next()|1&^(in.next()&0x80>>7))
		case 3:
			_ = fr.WriteWindowUpdate(stream(), fuzzIncrements[int(in.next())%len(fuzzIncrements)])
		case 4:
			_ = fr.WriteRSTStream(stream(), http2.ErrCode(in.next()%14))
		case 5:
			if in.next()%4 == 0 {
				_ = fr.WriteSettingsAck()
				break
			}
			var ss []http2.Setting
			for range int(in.next() % 4) {
				ss = append(ss, http2.Setting{ID: fuzzSettings[int(in.next())%len(fuzzSettings)],
					Val: fuzzSettingVals[int(in.next())%len(fuzzSettingVals)]})
			}
			_ = fr.WriteSettings(ss...)
		case 6:
			_ = fr.WritePing(in.next()%2 == 0, [8]byte{in.next()})
		case 7:
			id := stream()
			dep := uint32(0)
			if in.next()%2 == 0 {
				dep = id
			}
			_ = fr.WritePriority(id, http2.PriorityParam{StreamDep: dep, Weight: in.next()})
		case 8:
			_ = fr.WriteGoAway(nextID, http2.ErrCode(in.next()%3), nil)
		case 9:
			_ = fr.WriteContinuation(stream(), true, block([][2]string{{"x-a", "1"}}))
		case 10:
			var p [4]byte
			binary.BigEndian.PutUint32(p[:], uint32(in.next()))
			_ = fr.WriteRawFrame(http2.FrameType(0x20+in.next()%3), http2.Flags(in.next()), stream(), p[:])
		case 11:
			_ = fr.WritePushPromise(http2.PushPromiseParam{StreamID: stream(), PromiseID: 2, EndHeaders: true,
				BlockFragment: block([][2]string{{":method", "GET"}})})
		}
	}
	return out.Bytes()
}
