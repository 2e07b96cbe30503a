package webhook

import (
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"testing"

	jsonpatch "github.com/evanphx/json-patch/v5"
	admissionv1 "k8s.io/api/admission/v1"

	"github.com/weft-mesh/weft/bootstrap/inject"
)

// FuzzReview: whatever the body, Review answers an AdmissionReview v1 and never
// panics; a malformed review is allowed with no patch; a patch always applies
// to the request's object. Corpus: testdata/fuzz/FuzzReview, plus the golden
// requests.
func FuzzReview(f *testing.F) {
	for _, name := range GoldenReviews {
		b, err := os.ReadFile(filepath.Join("testdata", name+".request.json"))
		if err != nil {
			f.Fatal(err)
		}
		f.Add(b)
	}
	settings := func() (inject.Config, error) { return inject.Config{}, nil }
	f.Fuzz(func(t *testing.T, body []byte) {
		out, outcome, logErr := Review(body, settings)
		var r admissionv1.AdmissionReview
		if err := json.Unmarshal(out, &r); err != nil || r.APIVersion != APIVersion || r.Kind != Kind || r.Response == nil {
			t.Fatalf("answer %s: %v", out, err)
		}
		resp := r.Response
		switch outcome {
		case Malformed:
			if !resp.Allowed || resp.Patch != nil || !errors.Is(logErr, ErrMalformed) {
				t.Fatalf("malformed: %s (%v)", out, logErr)
			}
		case Denied:
			if resp.Allowed || resp.Result == nil || logErr == nil {
				t.Fatalf("denied: %s", out)
			}
		case Injected:
			req, _, err := Decode(body)
			if err != nil {
				t.Fatal(err)
			}
			p, err := jsonpatch.DecodePatch(resp.Patch)
			if err != nil {
				t.Fatalf("patch: %v", err)
			}
			if _, err := p.Apply(req.Object.Raw); err != nil {
				t.Fatalf("patch does not apply to the object: %v\npatch %s\nobject %s", err, resp.Patch, req.Object.Raw)
			}
		case Skipped, Ignored:
			if !resp.Allowed || resp.Patch != nil {
				t.Fatalf("%s: %s", outcome, out)
			}
		default:
			t.Fatalf("outcome %q", outcome)
		}
	})
}
