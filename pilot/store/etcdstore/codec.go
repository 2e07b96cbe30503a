package etcdstore

import (
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"strconv"
	"time"

	"github.com/weft-mesh/weft/pilot/store"
)

// keys are the etcd keys under one prefix (see the package doc).
type keys struct {
	prefix    string
	id        string // the store's identity, made by the first Open
	log       string // watched by every replica: head, compacted, records
	head      string
	compacted string
	records   string
	chunks    string
	chunkIdx  string
	snapshots string
	manifest  string
}

func newKeys(prefix string) keys {
	return keys{
		prefix: prefix, id: prefix + "id", log: prefix + "l/", head: prefix + "l/head", compacted: prefix + "l/compacted",
		records: prefix + "l/r/", chunks: prefix + "c/", chunkIdx: prefix + "ci/",
		snapshots: prefix + "s/", manifest: prefix + "s/manifest",
	}
}

// revDigits keeps revision keys in numeric order (int64 has at most 19 digits).
const revDigits = 20

func revString(r store.Revision) string { return fmt.Sprintf("%0*d", revDigits, r) }

func (k keys) record(r store.Revision) string     { return k.records + revString(r) }
func (k keys) chunkIndex(r store.Revision) string { return k.chunkIdx + revString(r) }
func (k keys) chunkDir(id string) string          { return k.chunks + id + "/" }
func (k keys) chunk(id string, i int) string      { return fmt.Sprintf("%s%06d", k.chunkDir(id), i) }
func (k keys) snapshotDir(r store.Revision) string {
	return k.snapshots + revString(r) + "/"
}
func (k keys) snapshotChunk(r store.Revision, i int) string {
	return fmt.Sprintf("%s%06d", k.snapshotDir(r), i)
}

// recordRevision parses the revision out of a record key.
func (k keys) recordRevision(key string) (store.Revision, bool) {
	if len(key) != len(k.records)+revDigits || key[:len(k.records)] != k.records {
		return 0, false
	}
	r, err := strconv.ParseInt(key[len(k.records):], 10, 64)
	return store.Revision(r), err == nil && r > 0
}

func parseRevision(what string, v []byte) (store.Revision, error) {
	r, err := strconv.ParseInt(string(v), 10, 64)
	if err != nil || r < 0 {
		return 0, fmt.Errorf("%s: %q is not a revision", what, v)
	}
	return store.Revision(r), nil
}

// record is one revision's change set as stored at l/r/<R>: the events inline,
// or (Chunks > 0) a manifest of the chunks c/<ID>/0.. that concatenate to the
// events' JSON array.
type record struct {
	ID     string          `json:"id"`
	Time   time.Time       `json:"time"`
	Events json.RawMessage `json:"events,omitempty"`
	Chunks int             `json:"chunks,omitempty"`
	Bytes  int             `json:"bytes,omitempty"`
	SHA256 string          `json:"sha256,omitempty"`
}

// recEvent is one event inside a change set; the object carries its revision.
type recEvent struct {
	Op     store.Op        `json:"op"`
	Object json.RawMessage `json:"object"`
}

// manifest names the newest snapshot: every object at revision Rev.
type manifest struct {
	Rev    store.Revision `json:"rev"`
	Chunks int            `json:"chunks"`
	Bytes  int            `json:"bytes"`
	SHA256 string         `json:"sha256"`
}

func newID() string {
	b := make([]byte, 12)
	_, _ = rand.Read(b) // crypto/rand.Read never fails (Go 1.24+)
	return hex.EncodeToString(b)
}

func sum(b []byte) string {
	h := sha256.Sum256(b)
	return hex.EncodeToString(h[:])
}

// split cuts data into pieces of at most n bytes.
func split(data []byte, n int) [][]byte {
	var out [][]byte
	for len(data) > n {
		out = append(out, data[:n])
		data = data[n:]
	}
	return append(out, data)
}

// joinChunks checks and concatenates chunks read back for something that was
// split into want pieces of total bytes with the given SHA-256.
func joinChunks(what string, chunks [][]byte, want, total int, hash string) ([]byte, error) {
	if len(chunks) != want {
		return nil, fmt.Errorf("%s: %d of %d chunks present", what, len(chunks), want)
	}
	out := make([]byte, 0, total)
	for _, c := range chunks {
		out = append(out, c...)
	}
	if len(out) != total || sum(out) != hash {
		return nil, fmt.Errorf("%s: chunks hold %d bytes (want %d) or fail their SHA-256", what, len(out), total)
	}
	return out, nil
}

// decodeEvents decodes a change set's events (all of revision rev).
func decodeEvents(rev store.Revision, t time.Time, data []byte) ([]store.Event, error) {
	var evs []recEvent
	if err := json.Unmarshal(data, &evs); err != nil {
		return nil, fmt.Errorf("record %d: %w", rev, err)
	}
	if len(evs) == 0 {
		return nil, fmt.Errorf("record %d: no events", rev)
	}
	out := make([]store.Event, len(evs))
	for i, e := range evs {
		if e.Op != store.OpPut && e.Op != store.OpDelete {
			return nil, fmt.Errorf("record %d: event %d: op %q is not PUT or DELETE", rev, i, e.Op)
		}
		o, err := store.DecodeObject(e.Object)
		if err != nil {
			return nil, fmt.Errorf("record %d: event %d: %w", rev, i, err)
		}
		if o.Metadata.Revision != int64(rev) {
			return nil, fmt.Errorf("record %d: %s carries revision %d", rev, o.Key(), o.Metadata.Revision)
		}
		out[i] = store.Event{Revision: rev, Op: e.Op, Object: o, Time: t}
	}
	return out, nil
}
