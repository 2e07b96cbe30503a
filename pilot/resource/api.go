package resource

// This file fixes the package's entry points so other packages can build against
// them; the implementation lives in decode.go, shape.go, defaults.go, validate*.go
// and encode.go, the bounds in limits.go.

// ErrorList is a list of validation errors, each already formatted as
// "Kind/namespace/name: field.path[i]: what is wrong". Error() joins them with "\n".
type ErrorList []error

// Decode reads one or more YAML documents ("---" separated) strictly, applies
// defaults and validates each object on its own. source names the input (a file
// path) for errors about documents that have no usable kind/name yet, e.g.
// "dir/route.yaml: document 2: ...". On any error it returns a non-nil ErrorList
// and no objects.
//   func Decode(data []byte, source string) ([]*Object, error)
//
// DecodePath decodes a file or every *.yaml/*.yml/*.json file in a directory
// (sorted, not recursive), all-or-nothing.
//   func DecodePath(path string) ([]*Object, error)
//
// Validate checks one object (defaults already applied).
//   func Validate(o *Object) error
//
// ValidateSet runs cross-object checks over the objects that will exist after an
// apply (e.g. a Route naming a Service or subset that does not exist). It returns
// errors that must block the apply and warnings that must not.
//   func ValidateSet(objs []*Object) (errs ErrorList, warnings []string)
//
// Encode renders objects as multi-document YAML (format "yaml") or a JSON list
// (format "json"), Kubernetes style, with metadata.generation and revision.
//   func Encode(objs []*Object, format string) ([]byte, error)
//
// DecodeJSONObject decodes one object from JSON (the admin API body) strictly, with
// defaults and validation, like Decode.
//   func DecodeJSONObject(data []byte) (*Object, error)
