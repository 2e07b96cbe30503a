package xdswire_test

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"testing"

	"go.uber.org/goleak"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/reflect/protoregistry"

	// The full types the trimmed ones mirror, registered for the lookups below.
	_ "github.com/weft-mesh/weft/sidecar/xdswire/internal/envoyreg"

	"github.com/weft-mesh/weft/sidecar/xdswire"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

const pkg = "weft.xdswire.v1"

// envoyName is the Envoy full name a trimmed message or enum mirrors; names
// outside the trimmed package (well-known types) mirror themselves.
func envoyName(t *testing.T, d protoreflect.Descriptor) protoreflect.FullName {
	if d.ParentFile().Package() != pkg {
		return d.FullName()
	}
	if p, ok := d.Parent().(protoreflect.MessageDescriptor); ok {
		return envoyName(t, p).Append(d.Name())
	}
	n, ok := mirrors[d.FullName()]
	if !ok {
		t.Fatalf("%s: not in the mirror table (rerun go generate)", d.FullName())
	}
	return n
}

func envoyDesc(t *testing.T, d protoreflect.Descriptor) protoreflect.Descriptor {
	n := envoyName(t, d)
	e, err := protoregistry.GlobalFiles.FindDescriptorByName(n)
	if err != nil {
		t.Fatalf("%s mirrors %s: %v", d.FullName(), n, err)
	}
	return e
}

// TestCompatible checks every trimmed message and enum against the Envoy one
// of the same name in go-control-plane's registry: each field exists there with
// the same name, number, kind, cardinality, packedness, presence and oneof,
// and message or enum types mirror each other; an opaque field (bytes) stands
// for a message field. Enums are whole; a oneof keeps all its members; the
// complete messages keep every field.
func TestCompatible(t *testing.T) {
	fd := xdswire.File_xdswire_proto
	if fd.Package() != pkg {
		t.Fatalf("package %s, want %s", fd.Package(), pkg)
	}
	seen := 0
	var msg func(md protoreflect.MessageDescriptor)
	msg = func(md protoreflect.MessageDescriptor) {
		seen++
		em, ok := envoyDesc(t, md).(protoreflect.MessageDescriptor)
		if !ok {
			t.Fatalf("%s: mirrors a non-message", md.FullName())
		}
		fields := md.Fields()
		for i := 0; i < fields.Len(); i++ {
			checkField(t, fields.Get(i), em)
		}
		for i := 0; i < md.Oneofs().Len(); i++ {
			od := md.Oneofs().Get(i)
			if od.IsSynthetic() {
				continue
			}
			eo := em.Oneofs().ByName(od.Name())
			if eo == nil || od.Fields().Len() != eo.Fields().Len() {
				t.Errorf("%s: oneof %s does not keep all of %s's members", md.FullName(), od.Name(), em.FullName())
			}
		}
		for i := 0; i < md.Enums().Len(); i++ {
			checkEnum(t, md.Enums().Get(i))
		}
		for i := 0; i < md.Messages().Len(); i++ {
			if !md.Messages().Get(i).IsMapEntry() {
				msg(md.Messages().Get(i))
			}
		}
	}
	for i := 0; i < fd.Messages().Len(); i++ {
		msg(fd.Messages().Get(i))
	}
	for i := 0; i < fd.Enums().Len(); i++ {
		checkEnum(t, fd.Enums().Get(i))
	}
	if seen < 50 {
		t.Fatalf("checked %d messages: the trimmed file looks empty", seen)
	}
	for _, n := range complete {
		var tm protoreflect.MessageDescriptor
		for i := 0; i < fd.Messages().Len() && tm == nil; i++ {
			tm = findMirror(t, fd.Messages().Get(i), n)
		}
		if tm == nil {
			t.Errorf("complete message %s has no trimmed mirror", n)
			continue
		}
		em := envoyDesc(t, tm).(protoreflect.MessageDescriptor)
		if tm.Fields().Len() != em.Fields().Len() {
			t.Errorf("%s keeps %d of %s's %d fields, want all", tm.FullName(), tm.Fields().Len(), n, em.Fields().Len())
		}
	}
}

func findMirror(t *testing.T, md protoreflect.MessageDescriptor, n protoreflect.FullName) protoreflect.MessageDescriptor {
	if envoyName(t, md) == n {
		return md
	}
	for i := 0; i < md.Messages().Len(); i++ {
		if m := findMirror(t, md.Messages().Get(i), n); m != nil {
			return m
		}
	}
	return nil
}

func checkField(t *testing.T, f protoreflect.FieldDescriptor, em protoreflect.MessageDescriptor) {
	t.Helper()
	ef := em.Fields().ByNumber(f.Number())
	if ef == nil {
		t.Errorf("%s: number %d does not exist in %s", f.FullName(), f.Number(), em.FullName())
		return
	}
	where := string(f.FullName()) + " (" + string(ef.FullName()) + ")"
	switch {
	case f.Name() != ef.Name():
		t.Errorf("%s: name differs", where)
	case f.Cardinality() != ef.Cardinality():
		t.Errorf("%s: cardinality %s, Envoy %s", where, f.Cardinality(), ef.Cardinality())
	case f.IsMap() != ef.IsMap():
		t.Errorf("%s: map differs", where)
	case f.IsPacked() != ef.IsPacked():
		t.Errorf("%s: packed %v, Envoy %v", where, f.IsPacked(), ef.IsPacked())
	case f.HasPresence() != ef.HasPresence():
		t.Errorf("%s: presence %v, Envoy %v", where, f.HasPresence(), ef.HasPresence())
	case oneofName(f) != oneofName(ef):
		t.Errorf("%s: oneof %q, Envoy %q", where, oneofName(f), oneofName(ef))
	}
	if f.IsMap() {
		checkType(t, where+" key", f.MapKey(), ef.MapKey())
		checkType(t, where+" value", f.MapValue(), ef.MapValue())
		return
	}
	checkType(t, where, f, ef)
}

func oneofName(f protoreflect.FieldDescriptor) string {
	if o := f.ContainingOneof(); o != nil && !o.IsSynthetic() {
		return string(o.Name())
	}
	return ""
}

func checkType(t *testing.T, where string, f, ef protoreflect.FieldDescriptor) {
	t.Helper()
	if f.Kind() == protoreflect.BytesKind && ef.Kind() == protoreflect.MessageKind && !ef.IsMap() {
		return // opaque: the message's bytes, same wire type
	}
	if f.Kind() != ef.Kind() {
		t.Errorf("%s: kind %s, Envoy %s", where, f.Kind(), ef.Kind())
		return
	}
	switch f.Kind() {
	case protoreflect.MessageKind:
		if n := envoyName(t, f.Message()); n != ef.Message().FullName() {
			t.Errorf("%s: type %s mirrors %s, Envoy's is %s", where, f.Message().FullName(), n, ef.Message().FullName())
		}
	case protoreflect.EnumKind:
		if n := envoyName(t, f.Enum()); n != ef.Enum().FullName() {
			t.Errorf("%s: enum %s mirrors %s, Envoy's is %s", where, f.Enum().FullName(), n, ef.Enum().FullName())
		}
	}
}

func checkEnum(t *testing.T, ed protoreflect.EnumDescriptor) {
	t.Helper()
	ee, ok := envoyDesc(t, ed).(protoreflect.EnumDescriptor)
	if !ok {
		t.Fatalf("%s: mirrors a non-enum", ed.FullName())
	}
	if ed.Values().Len() != ee.Values().Len() {
		t.Errorf("%s: %d values, Envoy %d", ed.FullName(), ed.Values().Len(), ee.Values().Len())
	}
	for i := 0; i < ed.Values().Len(); i++ {
		v := ed.Values().Get(i)
		ev := ee.Values().ByNumber(v.Number())
		if ev == nil || ev.Name() != v.Name() {
			t.Errorf("%s: value %s = %d not in %s", ed.FullName(), v.Name(), v.Number(), ee.FullName())
		}
	}
}

// TestGenerated: xdswire.proto and the mirror table are what genproto writes
// from its spec today (go generate was rerun after the spec changed).
func TestGenerated(t *testing.T) {
	dir := t.TempDir()
	cmd := exec.Command("go", "run", "./internal/genproto", "-out", filepath.Join(dir, "x.proto"), "-mirror", filepath.Join(dir, "m.go"))
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("genproto: %v\n%s", err, out)
	}
	for _, f := range [][2]string{{"x.proto", "xdswire.proto"}, {"m.go", "mirror_gen_test.go"}} {
		got, err := os.ReadFile(filepath.Join(dir, f[0]))
		if err != nil {
			t.Fatal(err)
		}
		want, err := os.ReadFile(f[1])
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(got, want) {
			t.Errorf("%s is not what genproto writes: run go generate ./sidecar/xdswire", f[1])
		}
	}
}

// TestOpaquePresence: an opaque field (bytes for a message the sidecar never
// reads) set to an empty message, the usual way to switch an Envoy option on
// (http2_protocol_options: {}), reads as present in the trimmed type, and its
// Go getter is non-nil: the decoders test presence with `!= nil`.
func TestOpaquePresence(t *testing.T) {
	n := 0
	var msg func(md protoreflect.MessageDescriptor)
	msg = func(md protoreflect.MessageDescriptor) {
		for i := 0; i < md.Messages().Len(); i++ {
			if !md.Messages().Get(i).IsMapEntry() {
				msg(md.Messages().Get(i))
			}
		}
		em := envoyDesc(t, md).(protoreflect.MessageDescriptor)
		for i := 0; i < md.Fields().Len(); i++ {
			f := md.Fields().Get(i)
			ef := em.Fields().ByNumber(f.Number())
			if f.Kind() != protoreflect.BytesKind || ef.Kind() != protoreflect.MessageKind || f.IsList() || f.IsMap() {
				continue
			}
			n++
			et, err := protoregistry.GlobalTypes.FindMessageByName(em.FullName())
			if err != nil {
				t.Fatal(err)
			}
			sub, err := protoregistry.GlobalTypes.FindMessageByName(ef.Message().FullName())
			if err != nil {
				t.Fatal(err)
			}
			full := et.New()
			full.Set(ef, protoreflect.ValueOfMessage(sub.New()))
			b, err := proto.Marshal(full.Interface())
			if err != nil {
				t.Fatal(err)
			}
			tt, err := protoregistry.GlobalTypes.FindMessageByName(md.FullName())
			if err != nil {
				t.Fatal(err)
			}
			trimmed := tt.New()
			if err := proto.Unmarshal(b, trimmed.Interface()); err != nil {
				t.Fatal(err)
			}
			if !trimmed.Has(f) || trimmed.Get(f).Bytes() == nil {
				t.Errorf("%s: an empty %s reads as absent", f.FullName(), ef.Message().FullName())
			}
		}
	}
	fd := xdswire.File_xdswire_proto
	for i := 0; i < fd.Messages().Len(); i++ {
		msg(fd.Messages().Get(i))
	}
	if n < 20 {
		t.Fatalf("checked %d opaque fields, expected more", n)
	}
}
