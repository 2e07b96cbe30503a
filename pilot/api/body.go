package api

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"

	"github.com/weft-mesh/weft/pilot/resource"
	"github.com/weft-mesh/weft/pilot/store"
)

// errBadRequest marks request errors that are not resource validation errors
// (malformed envelope, If-Match misuse); they answer 400.
var errBadRequest = errors.New("bad request")

func badRequest(format string, args ...any) error {
	return fmt.Errorf("%w: %s", errBadRequest, fmt.Sprintf(format, args...))
}

// parseIfMatch reads an If-Match header: a generation, optionally quoted like an
// ETag. ok is false when the header is absent.
func parseIfMatch(h string) (gen int64, ok bool, err error) {
	h = strings.TrimSpace(h)
	if h == "" {
		return 0, false, nil
	}
	s := strings.TrimPrefix(h, "W/")
	if len(s) >= 2 && s[0] == '"' && s[len(s)-1] == '"' {
		s = s[1 : len(s)-1]
	}
	gen, err = strconv.ParseInt(s, 10, 64)
	if err != nil || gen < 0 {
		return 0, false, badRequest("If-Match: %q is not a generation (a number >= 0)", h)
	}
	return gen, true, nil
}

// isJSON says whether a body is JSON rather than YAML, by its first byte.
func isJSON(body []byte) (byte, bool) {
	t := bytes.TrimLeft(body, " \t\r\n")
	if len(t) == 0 {
		return 0, false
	}
	return t[0], t[0] == '{' || t[0] == '['
}

// decodeObjects decodes a request body: multi-document YAML, a JSON list, one JSON
// object or an ApplyRequest envelope. It returns the objects and the envelope's
// ifMatch map (nil when there is none). All validation errors are returned
// together as a resource.ErrorList.
func decodeObjects(body []byte, source string) ([]*resource.Object, map[string]int64, error) {
	first, js := isJSON(body)
	if first == 0 {
		return nil, nil, badRequest("%s: empty body", source)
	}
	if !js {
		objs, err := resource.Decode(body, source)
		if err != nil {
			return nil, nil, err
		}
		return objs, nil, nil
	}
	// encoding/json keeps the last of repeated keys: {"items": A, "items": B}
	// would apply B and drop A without a word. Refuse repeats anywhere first.
	if err := resource.CheckJSON(body); err != nil {
		return nil, nil, badRequest("%s: %v", source, err)
	}
	var raws []json.RawMessage
	var ifMatch map[string]int64
	if first == '[' {
		if err := json.Unmarshal(body, &raws); err != nil {
			return nil, nil, badRequest("%s: not a JSON list of objects: %v", source, err)
		}
	} else {
		var probe map[string]json.RawMessage
		if err := json.Unmarshal(body, &probe); err != nil {
			return nil, nil, badRequest("%s: invalid JSON: %v", source, err)
		}
		if _, env := probe["items"]; !env {
			o, err := resource.DecodeJSONObject(body)
			if err != nil {
				return nil, nil, err
			}
			return []*resource.Object{o}, nil, nil
		}
		var req ApplyRequest
		dec := json.NewDecoder(bytes.NewReader(body))
		dec.DisallowUnknownFields()
		if err := dec.Decode(&req); err != nil {
			return nil, nil, badRequest("%s: apply envelope: %v", source, err)
		}
		raws, ifMatch = req.Items, req.IfMatch
	}
	var errs resource.ErrorList
	objs := make([]*resource.Object, 0, len(raws))
	for i, raw := range raws {
		o, err := resource.DecodeJSONObject(raw)
		if err != nil {
			var el resource.ErrorList
			if errors.As(err, &el) {
				errs = append(errs, el...)
			} else {
				errs = append(errs, fmt.Errorf("%s: items[%d]: %w", source, i, err))
			}
			continue
		}
		objs = append(objs, o)
	}
	if len(errs) > 0 {
		return nil, nil, errs
	}
	return objs, ifMatch, nil
}

// applyMutations turns a bulk-apply body into store mutations, checking the
// If-Match rules and limits described in the package comment.
func applyMutations(body []byte, ifMatchHeader string, maxObjects int) ([]store.Mutation, error) {
	hdrGen, hdrOK, err := parseIfMatch(ifMatchHeader)
	if err != nil {
		return nil, err
	}
	objs, ifMatch, err := decodeObjects(body, "request body")
	if err != nil {
		return nil, err
	}
	if len(objs) == 0 {
		return nil, badRequest("request body: no objects to apply")
	}
	if len(objs) > maxObjects {
		return nil, badRequest("request body: %d objects, at most %d per apply", len(objs), maxObjects)
	}
	if hdrOK && (len(objs) != 1 || ifMatch != nil) {
		return nil, badRequest("If-Match header applies to a body with exactly one object; use the ifMatch map of the JSON envelope for several")
	}
	muts := make([]store.Mutation, 0, len(objs))
	seen := make(map[string]bool, len(objs))
	for _, o := range objs {
		k := o.Key().String()
		if seen[k] {
			return nil, badRequest("%s: appears more than once in one apply", k)
		}
		seen[k] = true
		m := store.Mutation{Op: store.OpPut, Object: o}
		if hdrOK {
			g := hdrGen
			m.IfMatch = &g
		}
		if g, ok := ifMatch[k]; ok {
			if g < 0 {
				return nil, badRequest("ifMatch[%q]: generation %d is negative", k, g)
			}
			m.IfMatch = &g
		}
		muts = append(muts, m)
	}
	for _, k := range slices.Sorted(maps.Keys(ifMatch)) {
		if !seen[k] {
			return nil, badRequest("ifMatch[%q]: no such object in items", k)
		}
	}
	return muts, nil
}
