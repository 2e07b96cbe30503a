package resource

import (
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
)

// Encode output of empty maps and lists omits them, so a round trip compares
// them as equal to nil.
var roundTripOpts = cmpopts.EquateEmpty()

func TestEncodeRoundTrip(t *testing.T) {
	objs, err := DecodePath("../../examples")
	if err != nil {
		t.Fatal(err)
	}
	objs[0].Metadata.Generation, objs[0].Metadata.Revision = 7, 42
	for _, format := range []string{"yaml", "json"} {
		t.Run(format, func(t *testing.T) {
			out, err := Encode(objs, format)
			if err != nil {
				t.Fatal(err)
			}
			back, err := Decode(out, "encoded."+format)
			if err != nil {
				t.Fatalf("Decode(Encode): %v\n%s", err, out)
			}
			if diff := cmp.Diff(objs, back, roundTripOpts); diff != "" {
				t.Errorf("round trip (-want +got):\n%s", diff)
			}
			again, err := Encode(back, format)
			if err != nil {
				t.Fatal(err)
			}
			if string(again) != string(out) {
				t.Errorf("Encode is not stable across a round trip")
			}
		})
	}
}

const workloadYAML = `apiVersion: mesh.weft.dev/v1alpha1
kind: Workload
metadata:
  generation: 2
  name: w
  namespace: shop
  revision: 9
spec:
  address: 10.0.0.1
  serviceAccount: default
  weight: 1
`

func TestEncodeFormat(t *testing.T) {
	o := object(KindWorkload, Metadata{Name: "w", Namespace: "shop", Generation: 2, Revision: 9}, &WorkloadSpec{Address: "10.0.0.1", ServiceAccount: "default", Weight: 1})
	for _, tc := range []struct {
		name, format, want string
		objs               []*Object
	}{
		{name: "yaml", format: "yaml", objs: []*Object{o, o}, want: workloadYAML + "---\n" + workloadYAML},
		{name: "json", format: "json", objs: []*Object{o}, want: `[
  {
    "apiVersion": "mesh.weft.dev/v1alpha1",
    "kind": "Workload",
    "metadata": {
      "name": "w",
      "namespace": "shop",
      "generation": 2,
      "revision": 9
    },
    "spec": {
      "address": "10.0.0.1",
      "serviceAccount": "default",
      "weight": 1
    }
  }
]
`},
		{name: "yaml_empty", format: "yaml", want: ""},
		{name: "json_empty", format: "json", want: "[]\n"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			out, err := Encode(tc.objs, tc.format)
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(tc.want, string(out)); diff != "" {
				t.Errorf("output (-want +got):\n%s", diff)
			}
		})
	}
	if _, err := Encode(nil, "toml"); err == nil || err.Error() != `encode: unknown format "toml" (want yaml or json)` {
		t.Errorf("Encode(toml) error = %v", err)
	}
}

func TestEncodeQuotesAmbiguousStrings(t *testing.T) {
	// YAML 1.1 would read these unquoted as booleans or numbers.
	o := object(KindService, Metadata{Name: "s", Namespace: "shop", Labels: map[string]string{"a": "yes", "b": "on", "c": "1.0", "d": "0x1F"}},
		&ServiceSpec{Ports: []ServicePort{{Name: "http", Port: 80, TargetPort: 80, Protocol: "HTTP"}}})
	out, err := Encode([]*Object{o}, "yaml")
	if err != nil {
		t.Fatal(err)
	}
	back, err := Decode(out, "t.yaml")
	if err != nil {
		t.Fatalf("Decode: %v\n%s", err, out)
	}
	if diff := cmp.Diff([]*Object{o}, back); diff != "" || !strings.Contains(string(out), `"yes"`) {
		t.Errorf("round trip (-want +got):\n%s\n%s", diff, out)
	}
}
