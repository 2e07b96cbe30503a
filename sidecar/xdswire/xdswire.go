// Package xdswire holds the sidecar's xDS wire types: the Envoy messages it
// reads and writes, trimmed to the fields it uses, with Envoy's message names,
// field numbers, types and cardinalities, so bytes marshalled from
// go-control-plane's full types decode here and the other way round. The
// sidecar binary then links none of go-control-plane's generated packages (and
// their cncf/xds, validate and annotation dependencies), whose descriptors it
// used to build at init: most of its idle memory (issue 7).
//
// The "no silent drops" rule the schema keeps (internal/genproto writes it):
//   - every field a decoder reads is in the schema (the compiler says so);
//   - every field whose presence a decoder refuses is in the schema, opaque
//     bytes when its content is not read;
//   - a oneof a decoder switches on has all its members, so "unset" means
//     unset and not "a case the schema lacks";
//   - messages checked field by field (xdsresource's onlyFields: the TLS
//     contexts, Secret, StringMatcher) are complete.
//
// Fields left out are ones no decoder reads: they arrive as unknown fields and
// are ignored, as the full types' decoder ignored them. compat_test.go checks
// every field against go-control-plane's registry; xdsresource's unknown-field
// test checks that what pilot generates leaves unknown fields only where the
// decoder ignores them on purpose.
//
// An Any's type URL names the Envoy message (type.googleapis.com/envoy...):
// decoders compare the URL themselves and proto.Unmarshal the value, never
// anypb.UnmarshalTo (which would compare the trimmed full name).
package xdswire

//go:generate go run ./internal/genproto -out xdswire.proto -mirror mirror_gen_test.go
//go:generate protoc -I. -Iinternal/include --go_out=. --go_opt=paths=source_relative xdswire.proto
