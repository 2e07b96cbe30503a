package boltstore

import (
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/weft-mesh/weft/pilot/resource"
	"github.com/weft-mesh/weft/pilot/store"
)

// Bucket and meta key names. The keyindex bucket maps object key + revision to the
// history entry so History of one object does not scan the whole history.
var (
	bucketObjects  = []byte("objects")
	bucketHistory  = []byte("history")
	bucketKeyIndex = []byte("keyindex")
	bucketMeta     = []byte("meta")

	metaRevision  = []byte("revision")
	metaCompacted = []byte("compacted-before")
)

// histKey is the big-endian revision then the event's index inside the revision, so
// a cursor walks history in commit order.
func histKey(rev store.Revision, idx int) []byte {
	b := make([]byte, 12)
	binary.BigEndian.PutUint64(b, uint64(rev))
	binary.BigEndian.PutUint32(b[8:], uint32(idx))
	return b
}

func histKeyRevision(k []byte) (store.Revision, error) {
	if len(k) != 12 {
		return 0, fmt.Errorf("history key has %d bytes, want 12", len(k))
	}
	return store.Revision(binary.BigEndian.Uint64(k)), nil
}

// indexKey is store.ObjectKey NUL histKey.
func indexKey(objKey string, rev store.Revision, idx int) []byte {
	return append([]byte(objKey+"\x00"), histKey(rev, idx)...)
}

func encodeUint(v int64) []byte {
	return binary.BigEndian.AppendUint64(nil, uint64(v))
}

func decodeUint(b []byte) (int64, error) {
	if b == nil {
		return 0, nil
	}
	if len(b) != 8 {
		return 0, fmt.Errorf("meta value has %d bytes, want 8", len(b))
	}
	return int64(binary.BigEndian.Uint64(b)), nil
}

type eventJSON struct {
	Revision store.Revision  `json:"revision"`
	Op       store.Op        `json:"op"`
	Time     time.Time       `json:"time"`
	Object   json.RawMessage `json:"object"`
}

type wireEvent struct {
	Revision store.Revision    `json:"revision"`
	Op       store.Op          `json:"op"`
	Time     time.Time         `json:"time"`
	Object   *store.WireObject `json:"object"`
}

func encodeObject(o *resource.Object) ([]byte, error) {
	b, err := json.Marshal(o)
	if err != nil {
		return nil, fmt.Errorf("%s: encode: %w", o.Key(), err)
	}
	return b, nil
}

// encodeEvent takes the event's object already encoded (objData), so an apply
// encodes each object once.
func encodeEvent(ev store.Event, objData []byte) ([]byte, error) {
	b, err := json.Marshal(eventJSON{Revision: ev.Revision, Op: ev.Op, Time: ev.Time, Object: objData})
	if err != nil {
		return nil, fmt.Errorf("%s: encode event: %w", ev.Object.Key(), err)
	}
	return b, nil
}

func decodeEvent(data []byte) (store.Event, error) {
	var w wireEvent
	if err := json.Unmarshal(data, &w); err != nil {
		return store.Event{}, fmt.Errorf("decode event: %w", err)
	}
	if w.Object == nil {
		return store.Event{}, errors.New("decode event: object missing")
	}
	if w.Op != store.OpPut && w.Op != store.OpDelete {
		return store.Event{}, fmt.Errorf("decode event: op %q is not PUT or DELETE", w.Op)
	}
	o, err := w.Object.Object()
	if err != nil {
		return store.Event{}, fmt.Errorf("decode event at revision %d: %w", w.Revision, err)
	}
	return store.Event{Revision: w.Revision, Op: w.Op, Object: o, Time: w.Time}, nil
}
