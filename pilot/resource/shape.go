package resource

import (
	"encoding/json"
	"fmt"
	"reflect"
	"sort"
	"strconv"
	"strings"
)

// The shape check walks a parsed document against the kind's Go types before the
// typed decode. encoding/json stops at the first problem and its messages lose
// list indexes; this walk reports every unknown field and wrong type with an exact
// path such as spec.http[0].route[1].weight. Field names match case-sensitively
// (encoding/json would accept "Name" for "name").

var (
	durationType = reflect.TypeOf(Duration(""))
	metadataType = reflect.TypeOf(Metadata{})
)

func checkEnvelope(c *collector, m map[string]any, info KindInfo) {
	for _, k := range sortedKeys(m) {
		v := m[k]
		switch k {
		case "apiVersion", "kind":
			checkShape(c, path(k), v, reflect.TypeOf(""))
		case "metadata":
			checkShape(c, "metadata", v, metadataType)
		case "spec":
			checkShape(c, "spec", v, reflect.TypeOf(info.NewSpec()))
		case "status":
			// Pilot writes status (a Service's allocated VIPs); a user cannot.
			// A null status is "absent", as everywhere else.
			if v != nil {
				c.add("status", ErrStatusSetByPilot)
			}
		default:
			c.add(path(k), "unknown field")
		}
	}
	// Required envelope fields are reported here, with any shape errors, because
	// without them there is no object to validate further.
	if m["apiVersion"] == nil {
		c.add("apiVersion", "required")
	}
	if meta, _ := m["metadata"].(map[string]any); meta["name"] == nil {
		c.add("metadata.name", "required")
	}
	if m["spec"] == nil {
		c.add("spec", "required")
	}
}

func checkShape(c *collector, p path, v any, t reflect.Type) {
	if v == nil {
		return // null is "absent", as in encoding/json
	}
	switch t.Kind() {
	case reflect.Pointer:
		checkShape(c, p, v, t.Elem())
	case reflect.Struct:
		m, ok := v.(map[string]any)
		if !ok {
			c.add(p, "expected an object, got "+jsonKind(v))
			return
		}
		fields := jsonFields(t)
		for _, k := range sortedKeys(m) {
			ft, ok := fields[k]
			if !ok {
				c.add(p.child(k), "unknown field")
				continue
			}
			checkShape(c, p.child(k), m[k], ft)
		}
	case reflect.Slice:
		l, ok := v.([]any)
		if !ok {
			c.add(p, "expected a list, got "+jsonKind(v))
			return
		}
		for i, e := range l {
			checkShape(c, p.index(i), e, t.Elem())
		}
	case reflect.Map:
		m, ok := v.(map[string]any)
		if !ok {
			c.add(p, "expected a map, got "+jsonKind(v))
			return
		}
		for _, k := range sortedKeys(m) {
			checkShape(c, p.key(k), m[k], t.Elem())
		}
	case reflect.String:
		if _, ok := v.(string); !ok {
			if t == durationType {
				c.add(p, `expected a duration string such as "5m", got `+jsonKind(v))
			} else {
				c.add(p, "expected a string, got "+jsonKind(v))
			}
		}
	case reflect.Bool:
		if _, ok := v.(bool); !ok {
			c.add(p, "expected true or false, got "+jsonKind(v))
		}
	case reflect.Int32, reflect.Int64:
		n, ok := v.(json.Number)
		if !ok {
			c.add(p, "expected an integer, got "+jsonKind(v))
			return
		}
		if _, err := strconv.ParseInt(n.String(), 10, t.Bits()); err != nil {
			if strings.ContainsAny(n.String(), ".eE") {
				c.add(p, "expected an integer, got "+jsonKind(v))
			} else {
				c.add(p, fmt.Sprintf("integer %s out of range", n))
			}
		}
	case reflect.Float64:
		n, ok := v.(json.Number)
		if !ok {
			c.add(p, "expected a number, got "+jsonKind(v))
			return
		}
		if _, err := strconv.ParseFloat(n.String(), 64); err != nil {
			c.add(p, fmt.Sprintf("number %s out of range", n))
		}
	default:
		// Every spec field is one of the kinds above; a new field type must be
		// added here, and the per-kind tests catch it.
		c.add(p, "unsupported field type "+t.String())
	}
}

// jsonFields maps a struct's JSON names to field types.
func jsonFields(t reflect.Type) map[string]reflect.Type {
	out := make(map[string]reflect.Type, t.NumField())
	for i := range t.NumField() {
		f := t.Field(i)
		name, _, _ := strings.Cut(f.Tag.Get("json"), ",")
		if name == "-" || !f.IsExported() {
			continue
		}
		if name == "" {
			name = f.Name
		}
		out[name] = f.Type
	}
	return out
}

func sortedKeys[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}

func jsonKind(v any) string {
	switch v := v.(type) {
	case nil:
		return "null"
	case string:
		return "string"
	case bool:
		return "boolean"
	case json.Number:
		return "number " + v.String()
	case []any:
		return "list"
	case map[string]any:
		return "object"
	}
	return fmt.Sprintf("%T", v)
}
