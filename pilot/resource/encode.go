package resource

import (
	"bytes"
	"encoding/json"
	"fmt"

	"sigs.k8s.io/yaml"
)

// Encode renders objects Kubernetes-style, including metadata.generation and
// metadata.revision when set: format "yaml" writes one document per object
// separated by "---", "json" writes an indented JSON list. Both decode back to the
// same objects with Decode.
func Encode(objs []*Object, format string) ([]byte, error) {
	switch format {
	case "json":
		list := objs
		if list == nil {
			list = []*Object{} // "[]", not "null"
		}
		b, err := json.MarshalIndent(list, "", "  ")
		if err != nil {
			return nil, fmt.Errorf("encode json: %w", err)
		}
		return append(b, '\n'), nil
	case "yaml":
		var buf bytes.Buffer
		for i, o := range objs {
			j, err := json.Marshal(o)
			if err != nil {
				return nil, fmt.Errorf("encode %s: %w", o, err)
			}
			y, err := yaml.JSONToYAML(j)
			if err != nil {
				return nil, fmt.Errorf("encode %s: %w", o, err)
			}
			if i > 0 {
				buf.WriteString("---\n")
			}
			buf.Write(y)
		}
		return buf.Bytes(), nil
	}
	return nil, fmt.Errorf("encode: unknown format %q (want yaml or json)", format)
}
