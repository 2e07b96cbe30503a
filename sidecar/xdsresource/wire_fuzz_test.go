package xdsresource_test

import (
	"fmt"
	"testing"

	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/types/known/anypb"
)

// wireKinds orders kinds for the fuzzer's selector byte.
var wireKinds = []string{"Listener", "RouteConfiguration", "Cluster", "ClusterLoadAssignment", "Secret", "LbEndpoint"}

// FuzzTrimmed is the differential check of the trimmed schema, at the proto
// level: the same bytes are unmarshalled into go-control-plane's full type and
// into the trimmed one, the trimmed one is marshalled again without its
// unknown fields, and what comes back must equal the full message restricted
// to the fields the trimmed schema has (recursively, and into every Any the
// decoder opens). Opaque fields (bytes standing for a message) are compared by
// presence: their content is never read.
//
// Deliberate difference: bytes the full type refuses may decode in the trimmed
// one when the malformed part is inside a field the trimmed schema does not
// structure (an unknown field, an opaque one): the sidecar does not validate
// what it never reads. The other way (trimmed refuses, full accepts) fails.
func FuzzTrimmed(f *testing.F) {
	idx := map[string]uint8{}
	for i, k := range wireKinds {
		idx[k] = uint8(i)
	}
	for _, r := range append(goldenResources(f), builtResources()...) {
		b, err := proto.Marshal(r.full)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(idx[string(r.full.ProtoReflect().Descriptor().Name())], b)
	}
	f.Fuzz(func(t *testing.T, k uint8, b []byte) {
		full, trimmed := kinds[wireKinds[int(k)%len(wireKinds)]]()
		checkTrimmed(t, full, trimmed, b, "")
	})
}

func checkTrimmed(t *testing.T, full, trimmed proto.Message, b []byte, path string) {
	errF := proto.Unmarshal(b, full)
	errT := proto.Unmarshal(b, trimmed)
	switch {
	case errT != nil && errF == nil:
		t.Fatalf("%s: the trimmed %T refuses what the full type accepts: %v", path, trimmed, errT)
	case errT != nil || errF != nil:
		return // both refuse, or the deliberate difference above
	}
	discardUnknown(trimmed.ProtoReflect())
	again, err := proto.Marshal(trimmed)
	if err != nil {
		t.Fatalf("%s: marshal trimmed: %v", path, err)
	}
	back := full.ProtoReflect().New().Interface()
	if err := proto.Unmarshal(again, back); err != nil {
		t.Fatalf("%s: the trimmed %T marshals what the full type refuses: %v", path, trimmed, err)
	}
	var pf, pb []string
	restrict(full.ProtoReflect(), trimmed.ProtoReflect().Descriptor(), "", &pf)
	restrict(back.ProtoReflect(), trimmed.ProtoReflect().Descriptor(), "", &pb)
	if !proto.Equal(full, back) {
		t.Fatalf("%s: the trimmed %T reads differently from the full type\nfull: %v\nback: %v", path, trimmed, full, back)
	}
	if fmt.Sprint(pf) != fmt.Sprint(pb) {
		t.Fatalf("%s: opaque fields differ\nfull: %v\nback: %v", path, pf, pb)
	}
	// Into the Anys the decoder opens.
	for _, a := range anys(full.ProtoReflect(), nil) {
		mk, ok := unpacked[a.GetTypeUrl()]
		if !ok {
			continue
		}
		fm, err := a.UnmarshalNew()
		if err != nil {
			continue // the full type refuses it: as above
		}
		proto.Reset(fm)
		checkTrimmed(t, fm, mk(), a.GetValue(), path+"/"+a.GetTypeUrl())
	}
}

func discardUnknown(m protoreflect.Message) {
	m.SetUnknown(nil)
	m.Range(func(fd protoreflect.FieldDescriptor, v protoreflect.Value) bool {
		eachMessage(fd, v, discardUnknown)
		return true
	})
}

// eachMessage calls fn on every message a field value holds.
func eachMessage(fd protoreflect.FieldDescriptor, v protoreflect.Value, fn func(protoreflect.Message)) {
	switch {
	case fd.IsMap():
		if fd.MapValue().Kind() == protoreflect.MessageKind {
			v.Map().Range(func(_ protoreflect.MapKey, mv protoreflect.Value) bool { fn(mv.Message()); return true })
		}
	case fd.Kind() != protoreflect.MessageKind:
	case fd.IsList():
		for i := 0; i < v.List().Len(); i++ {
			fn(v.List().Get(i).Message())
		}
	default:
		fn(v.Message())
	}
}

// restrict clears from the full message m what the trimmed type td does not
// structure: its unknown fields, fields td lacks, and opaque fields, whose
// presence (and count) it records in opaque instead.
func restrict(m protoreflect.Message, td protoreflect.MessageDescriptor, path string, opaque *[]string) {
	m.SetUnknown(nil)
	var clear []protoreflect.FieldDescriptor
	m.Range(func(fd protoreflect.FieldDescriptor, v protoreflect.Value) bool {
		p := path + "." + string(fd.Name())
		tf := td.Fields().ByNumber(fd.Number())
		switch {
		case tf == nil:
			clear = append(clear, fd)
		case fd.Kind() == protoreflect.MessageKind && tf.Kind() == protoreflect.BytesKind:
			n := 1
			if fd.IsList() {
				n = v.List().Len()
			}
			*opaque = append(*opaque, fmt.Sprintf("%s×%d", p, n))
			clear = append(clear, fd)
		case fd.IsMap() && fd.MapValue().Kind() == protoreflect.MessageKind:
			sub := tf.MapValue().Message()
			v.Map().Range(func(k protoreflect.MapKey, mv protoreflect.Value) bool {
				restrict(mv.Message(), sub, p+"["+k.String()+"]", opaque)
				return true
			})
		case fd.Kind() == protoreflect.MessageKind:
			sub := tf.Message()
			eachMessage(fd, v, func(x protoreflect.Message) { restrict(x, sub, p, opaque) })
		}
		return true
	})
	for _, fd := range clear {
		m.Clear(fd)
	}
}

// anys lists the Anys in m's set fields.
func anys(m protoreflect.Message, out []*anypb.Any) []*anypb.Any {
	if a, ok := m.Interface().(*anypb.Any); ok {
		return append(out, a)
	}
	m.Range(func(fd protoreflect.FieldDescriptor, v protoreflect.Value) bool {
		eachMessage(fd, v, func(x protoreflect.Message) { out = anys(x, out) })
		return true
	})
	return out
}
