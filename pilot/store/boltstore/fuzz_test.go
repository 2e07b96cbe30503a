package boltstore

import (
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
	"github.com/weft-mesh/weft/pilot/store"
)

// The bbolt file is outside input: a damaged or hand-edited file must give errors,
// never panics, and whatever decodes must survive an encode/decode round trip.

// emptyIsNil: omitempty drops an empty map or list, which then decodes as nil;
// both mean the same.
var emptyIsNil = cmpopts.EquateEmpty()

func FuzzDecodeEvent(f *testing.F) {
	f.Add([]byte(`{"revision":3,"op":"PUT","time":"2026-01-02T03:04:05Z","object":{"apiVersion":"mesh.weft.dev/v1alpha1","kind":"Service","metadata":{"name":"a","namespace":"default","generation":1,"revision":3},"spec":{"ports":[{"name":"http","port":80}]}}}`))
	f.Fuzz(func(t *testing.T, data []byte) {
		ev, err := decodeEvent(data)
		if err != nil {
			return
		}
		obj, err := encodeObject(ev.Object)
		if err != nil {
			t.Fatalf("re-encode of a decoded event's object: %v", err)
		}
		enc, err := encodeEvent(ev, obj)
		if err != nil {
			t.Fatalf("re-encode of a decoded event: %v", err)
		}
		again, err := decodeEvent(enc)
		if err != nil {
			t.Fatalf("decode of a re-encoded event: %v\n%s", err, enc)
		}
		if d := cmp.Diff(ev, again, emptyIsNil); d != "" {
			t.Fatalf("round trip changed the event (-first +second):\n%s", d)
		}
	})
}

func FuzzDecodeObject(f *testing.F) {
	f.Add([]byte(`{"apiVersion":"mesh.weft.dev/v1alpha1","kind":"Route","metadata":{"name":"r","namespace":"default"},"spec":{"hosts":["a"],"http":[{"route":[{"destination":{"service":"a"}}]}]}}`))
	f.Fuzz(func(t *testing.T, data []byte) {
		o, err := store.DecodeObject(data)
		if err != nil {
			return
		}
		enc, err := encodeObject(o)
		if err != nil {
			t.Fatalf("re-encode of a decoded object: %v", err)
		}
		again, err := store.DecodeObject(enc)
		if err != nil {
			t.Fatalf("decode of a re-encoded object: %v\n%s", err, enc)
		}
		if d := cmp.Diff(o, again, emptyIsNil); d != "" {
			t.Fatalf("round trip changed the object (-first +second):\n%s", d)
		}
	})
}
