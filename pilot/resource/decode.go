package resource

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strconv"
	"strings"

	"sigs.k8s.io/yaml"
)

// Decode reads one or more YAML (or JSON) documents strictly, applies defaults and
// validates each object on its own; see api.go for the contract. A document may
// also be a list of objects (what Encode(objs, "json") writes). Documents that are
// empty or only comments are skipped; "document N" in errors counts the non-empty
// documents of source from 1.
//
// metadata.generation and metadata.revision are server-owned: Decode keeps what it
// reads (so Decode(Encode(x)) == x and a `meshctl get` dump re-validates), but the
// store overwrites both on apply and never treats them as a precondition; If-Match
// is always explicit.
func Decode(data []byte, source string) ([]*Object, error) {
	d := newDecoder()
	d.decode(data, source)
	return d.result()
}

// DecodePath decodes a file, or every *.yaml, *.yml and *.json file directly in a
// directory (sorted by name, not recursive, dot-files skipped), all-or-nothing:
// any error in any file returns no objects.
func DecodePath(p string) ([]*Object, error) {
	st, err := os.Stat(p)
	if err != nil {
		return nil, fmt.Errorf("decode %s: %w", p, err)
	}
	files := []string{p}
	if st.IsDir() {
		entries, err := os.ReadDir(p)
		if err != nil {
			return nil, fmt.Errorf("decode %s: %w", p, err)
		}
		files = files[:0]
		for _, e := range entries {
			name := e.Name()
			ext := strings.ToLower(filepath.Ext(name))
			if e.IsDir() || strings.HasPrefix(name, ".") || (ext != ".yaml" && ext != ".yml" && ext != ".json") {
				continue
			}
			files = append(files, filepath.Join(p, name))
		}
		if len(files) == 0 {
			return nil, fmt.Errorf("decode %s: no *.yaml, *.yml or *.json files in directory", p)
		}
		sort.Strings(files) // ReadDir sorts already; keep the contract explicit
	}
	d := newDecoder()
	for _, f := range files {
		data, err := readLimited(f)
		if err != nil {
			d.errs = append(d.errs, err)
			continue
		}
		d.decode(data, f)
	}
	return d.result()
}

// readLimited reads a file but refuses one larger than MaxInputBytes without
// reading it all.
func readLimited(name string) ([]byte, error) {
	f, err := os.Open(name)
	if err != nil {
		return nil, fmt.Errorf("decode %s: %w", name, err)
	}
	defer f.Close()
	data, err := io.ReadAll(io.LimitReader(f, MaxInputBytes+1))
	if err != nil {
		return nil, fmt.Errorf("decode %s: %w", name, err)
	}
	if len(data) > MaxInputBytes {
		return nil, &FieldError{Object: name, Detail: fmt.Sprintf("input is larger than the limit of %d bytes", MaxInputBytes)}
	}
	return data, nil
}

// DecodeJSONObject decodes one object from JSON (the admin API body) strictly,
// with defaults and validation, like Decode. Duplicate keys and trailing data are
// errors. Errors are an ErrorList.
func DecodeJSONObject(data []byte) (*Object, error) {
	const label = "request body"
	if len(data) > MaxObjectBytes {
		return nil, ErrorList{&FieldError{Object: label, Detail: fmt.Sprintf("object is %d bytes, limit %d", len(data), MaxObjectBytes)}}
	}
	v, err := parseJSON(data)
	if err != nil {
		return nil, ErrorList{&FieldError{Object: label, Detail: "invalid JSON: " + err.Error()}}
	}
	if _, ok := v.(map[string]any); !ok {
		return nil, ErrorList{&FieldError{Object: label, Detail: "expected one object, got " + jsonKind(v)}}
	}
	o, errs := decodeValue(label, v, data)
	if len(errs) > 0 {
		return nil, errs
	}
	return o, nil
}

var errNotJSON = errors.New("not JSON")

// decoder accumulates objects and errors over several inputs so duplicates and
// limits are checked across a whole directory.
type decoder struct {
	objs []*Object
	errs ErrorList
	seen map[Key]string // key -> label of the document that defined it first
}

func newDecoder() *decoder { return &decoder{seen: map[Key]string{}} }

func (d *decoder) result() ([]*Object, error) {
	if len(d.objs) > MaxObjectsPerInput {
		d.errs = append(d.errs, &FieldError{Object: "input", Detail: fmt.Sprintf("%d objects, limit %d", len(d.objs), MaxObjectsPerInput)})
	}
	if len(d.errs) > 0 {
		return nil, d.errs
	}
	return d.objs, nil
}

func (d *decoder) decode(data []byte, source string) {
	if len(data) > MaxInputBytes {
		d.errs = append(d.errs, &FieldError{Object: source, Detail: fmt.Sprintf("input is %d bytes, limit %d", len(data), MaxInputBytes)})
		return
	}
	n := 0
	for _, doc := range splitDocuments(data) {
		label := func() string { return fmt.Sprintf("%s: document %d", source, n) }
		// JSON (what Encode writes, and large generated lists) skips the YAML parser;
		// anything that is not valid JSON goes through it as YAML.
		j := doc.body
		v, err := any(nil), errNotJSON
		if t := bytes.TrimLeft(j, " \t\r\n"); len(t) > 0 && (t[0] == '{' || t[0] == '[') {
			v, err = parseJSON(j)
		}
		if err != nil {
			j, err = yaml.YAMLToJSONStrict(doc.body)
			if err == nil && bytes.Equal(j, []byte("null")) {
				continue // empty document or only comments
			}
			if err != nil {
				n++
				d.errs = append(d.errs, &FieldError{Object: label(), Detail: "invalid YAML: " + fileLines(oneLine(err.Error()), doc.line-1)})
				continue
			}
			v, err = parseJSON(j)
		}
		n++
		if err != nil {
			d.errs = append(d.errs, &FieldError{Object: label(), Detail: "invalid document: " + oneLine(err.Error())})
			continue
		}
		if list, ok := v.([]any); ok {
			for i, item := range list {
				ij, err := json.Marshal(item)
				if err != nil {
					d.errs = append(d.errs, &FieldError{Object: fmt.Sprintf("%s[%d]", label(), i), Detail: err.Error()})
					continue
				}
				d.add(fmt.Sprintf("%s[%d]", label(), i), item, ij)
			}
			continue
		}
		// A list document holds many objects, each bounded by its JSON form in
		// decodeValue; a single-object document is bounded by its own bytes too.
		if len(doc.body) > MaxObjectBytes {
			d.errs = append(d.errs, &FieldError{Object: label(), Detail: fmt.Sprintf("object is %d bytes, limit %d", len(doc.body), MaxObjectBytes)})
			continue
		}
		d.add(label(), v, j)
	}
}

func (d *decoder) add(label string, v any, j []byte) {
	o, errs := decodeValue(label, v, j)
	if len(errs) > 0 {
		d.errs = append(d.errs, errs...)
		return
	}
	if first, dup := d.seen[o.Key()]; dup {
		d.errs = append(d.errs, &FieldError{Object: o.Key().String(), Detail: "duplicate object: also defined in " + first})
		return
	}
	d.seen[o.Key()] = label
	d.objs = append(d.objs, o)
}

var yamlLine = regexp.MustCompile(`\bline (\d+)`)

// fileLines shifts the parser's document-relative "line N" to the file's line.
func fileLines(msg string, offset int) string {
	return yamlLine.ReplaceAllStringFunc(msg, func(m string) string {
		n, err := strconv.Atoi(m[len("line "):])
		if err != nil {
			return m
		}
		return "line " + strconv.Itoa(n+offset)
	})
}

// oneLine flattens multi-line parser messages so each error stays one line.
func oneLine(s string) string {
	s = strings.TrimPrefix(s, "error converting YAML to JSON: ")
	return strings.Join(strings.Fields(s), " ")
}

type document struct {
	line int // 1-based line of the document's first line in the input
	body []byte
}

// splitDocuments splits a YAML stream at "---" lines. A marker is only ever at
// column 0, so a block scalar cannot contain one.
func splitDocuments(data []byte) []document {
	var docs []document
	start, startLine, line := 0, 1, 1
	for i := 0; i < len(data); {
		end := bytes.IndexByte(data[i:], '\n')
		next := len(data)
		if end >= 0 {
			next = i + end + 1
		}
		l := data[i:next]
		if isDocMarker(l) {
			docs = append(docs, document{line: startLine, body: data[start:i]})
			// Content after the marker ("--- {a: 1}") belongs to the next document;
			// a bare marker (or one with a comment) starts it on the next line.
			if rest := bytes.TrimSpace(l[3:]); len(rest) == 0 || rest[0] == '#' {
				start, startLine = next, line+1
			} else {
				start, startLine = i+3, line
			}
		}
		i = next
		line++
	}
	return append(docs, document{line: startLine, body: data[start:]})
}

func isDocMarker(l []byte) bool {
	if !bytes.HasPrefix(l, []byte("---")) {
		return false
	}
	rest := l[3:]
	return len(rest) == 0 || rest[0] == ' ' || rest[0] == '\t' || rest[0] == '\n' || rest[0] == '\r'
}

// decodeValue turns one parsed document into an Object: shape check with exact
// field paths, typed decode, defaults, validation. j is the document's JSON.
func decodeValue(label string, v any, j []byte) (*Object, ErrorList) {
	c := &collector{object: label}
	if len(j) > MaxObjectBytes {
		c.add("", fmt.Sprintf("object is %d bytes as JSON, limit %d", len(j), MaxObjectBytes))
		return nil, c.errs
	}
	m, ok := v.(map[string]any)
	if !ok {
		c.add("", "expected an object with apiVersion, kind, metadata and spec, got "+jsonKind(v))
		return nil, c.errs
	}
	kind, _ := m["kind"].(string)
	info, known := kindByName(kind)
	switch {
	case m["kind"] == nil:
		c.add("kind", "required")
		return nil, c.errs
	case !known:
		c.add("kind", fmt.Sprintf("unknown kind %s (known: %s)", describe(m["kind"]), kindNames()))
		return nil, c.errs
	}
	c.object = identify(label, info, m)
	checkEnvelope(c, m, info)
	if len(c.errs) > 0 {
		return nil, c.errs
	}
	var env struct {
		APIVersion string          `json:"apiVersion"`
		Kind       string          `json:"kind"`
		Metadata   Metadata        `json:"metadata"`
		Spec       json.RawMessage `json:"spec"`
		Status     json.RawMessage `json:"status"` // only null gets here (checkEnvelope)
	}
	if err := strictUnmarshal(j, &env); err != nil {
		c.add("", err.Error()) // the shape check should have caught it; keep a safety net
		return nil, c.errs
	}
	spec := info.NewSpec()
	if err := strictUnmarshal(env.Spec, spec); err != nil {
		c.add("spec", err.Error())
		return nil, c.errs
	}
	o := &Object{APIVersion: env.APIVersion, Kind: env.Kind, Metadata: env.Metadata, Spec: spec}
	ApplyDefaults(o)
	if err := Validate(o); err != nil {
		return nil, err.(ErrorList)
	}
	return o, nil
}

func strictUnmarshal(j []byte, into any) error {
	dec := json.NewDecoder(bytes.NewReader(j))
	dec.DisallowUnknownFields()
	return dec.Decode(into)
}

// identify names a document by Kind/namespace/name once it has a usable name, so
// errors point at the object the user wrote rather than at a document number.
func identify(label string, info KindInfo, m map[string]any) string {
	meta, _ := m["metadata"].(map[string]any)
	name, _ := meta["name"].(string)
	ns, _ := meta["namespace"].(string)
	if name == "" {
		return label + " (" + info.Kind + ")"
	}
	if ns == "" && info.Namespaced {
		ns = DefaultNamespace
	}
	return Key{Kind: info.Kind, Namespace: ns, Name: name}.String()
}

func kindByName(s string) (KindInfo, bool) {
	for _, k := range kinds {
		if k.Kind == s {
			return k, true
		}
	}
	return KindInfo{}, false
}

func kindNames() string {
	names := make([]string, len(kinds))
	for i, k := range kinds {
		names[i] = k.Kind
	}
	return strings.Join(names, ", ")
}

func describe(v any) string {
	if s, ok := v.(string); ok {
		return fmt.Sprintf("%q", s)
	}
	return jsonKind(v)
}

// parseJSON parses JSON into generic values (numbers as json.Number), refusing
// duplicate keys, nesting deeper than MaxNestingDepth and trailing data.
func parseJSON(data []byte) (any, error) {
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.UseNumber()
	v, err := parseValue(dec, "", 0)
	if err != nil {
		return nil, err
	}
	if _, err := dec.Token(); err != io.EOF {
		return nil, errors.New("unexpected data after the top-level value")
	}
	return v, nil
}

func parseValue(dec *json.Decoder, p path, depth int) (any, error) {
	if depth > MaxNestingDepth {
		return nil, fmt.Errorf("%s: nested deeper than %d levels", orRoot(p), MaxNestingDepth)
	}
	tok, err := dec.Token()
	if err == io.EOF {
		return nil, io.ErrUnexpectedEOF // a value was expected here
	}
	if err != nil {
		return nil, err
	}
	switch tok {
	case json.Delim('{'):
		m := map[string]any{}
		for dec.More() {
			kt, err := dec.Token()
			if err == io.EOF {
				return nil, io.ErrUnexpectedEOF
			}
			if err != nil {
				return nil, err
			}
			k, _ := kt.(string)
			if _, dup := m[k]; dup {
				return nil, fmt.Errorf("%s: duplicate key", p.child(k))
			}
			if m[k], err = parseValue(dec, p.child(k), depth+1); err != nil {
				return nil, err
			}
		}
		_, err := dec.Token() // '}'
		return m, err
	case json.Delim('['):
		l := []any{}
		for i := 0; dec.More(); i++ {
			v, err := parseValue(dec, p.index(i), depth+1)
			if err != nil {
				return nil, err
			}
			l = append(l, v)
		}
		_, err := dec.Token() // ']'
		return l, err
	}
	return tok, nil
}

func orRoot(p path) string {
	if p == "" {
		return "(root)"
	}
	return string(p)
}
