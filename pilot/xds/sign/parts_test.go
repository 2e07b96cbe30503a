package sign

import (
	"bytes"
	"crypto/x509"
	"testing"
	"time"

	"github.com/weft-mesh/weft/certs/ca"
	"github.com/weft-mesh/weft/certs/manifest"
	"github.com/weft-mesh/weft/certs/spiffe"
	"github.com/weft-mesh/weft/pilot/xds/snapshot"
)

// TestJoinIsAssembled: a manifest joined from its encoded parts (Resource) is
// protobuf's encoding of manifest.Assemble's SignedManifest, byte for byte (so
// its version too), with a chain and without; the parts refuse what Assemble
// refuses, with its messages.
func TestJoinIsAssembled(t *testing.T) {
	c, err := ca.Open(ca.Config{Dir: t.TempDir(), TrustDomain: "cluster.local"})
	if err != nil {
		t.Fatal(err)
	}
	id, err := spiffe.Publisher("cluster.local")
	if err != nil {
		t.Fatal(err)
	}
	priv, other := key(t, 5), key(t, 6)
	chain, err := c.SignKey(priv.Public(), id, nil, nil, time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	snap := testSnap(t)
	content, err := ContentAtEpoch(priv, "scope-a", snap, issued, time.Hour, 3)
	if err != nil {
		t.Fatal(err)
	}
	otherContent, err := Content(other, "scope-a", snap, issued, time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	binding, err := Binding(priv, "node-1", "scope-a", Stream{Current: true, Revision: 7}, issued, time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	join := func(content, binding *manifest.Signed, chain ...*x509.Certificate) (string, []byte, error) {
		cp, err := EncodeContent(content)
		if err != nil {
			return "", nil, err
		}
		bp, err := EncodeBinding(binding)
		if err != nil {
			return "", nil, err
		}
		ch, err := EncodeChain(chain...)
		if err != nil {
			return "", nil, err
		}
		r, err := Join(cp, bp, ch)
		return r.Version, r.Any.GetValue(), err
	}
	for _, tc := range []struct {
		name             string
		content, binding *manifest.Signed
		chain            []*x509.Certificate
	}{
		{"with a chain", content, binding, chain},
		{"without a chain", content, binding, nil},
		{"content of another key", otherContent, binding, nil},
		{"chain of another key", otherContent, func() *manifest.Signed {
			b, err := Binding(other, "node-1", "scope-a", Stream{}, issued, time.Hour)
			if err != nil {
				t.Fatal(err)
			}
			return b
		}(), chain},
		{"an empty certificate", content, binding, []*x509.Certificate{{}}},
		{"a chain too long", content, binding, make([]*x509.Certificate, manifest.MaxChainCerts+1)},
		{"no binding", content, nil, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var want snapshot.Resource
			sm, wantErr := manifest.Assemble(tc.content, tc.binding, tc.chain...)
			if wantErr == nil {
				if want, err = snapshot.NewResource(manifest.TypeURL, manifest.Name, sm); err != nil {
					t.Fatal(err)
				}
			}
			ver, got, err := join(tc.content, tc.binding, tc.chain...)
			if (err == nil) != (wantErr == nil) || err != nil && err.Error() != wantErr.Error() {
				t.Fatalf("Join error %v, Resource's %v", err, wantErr)
			}
			if err != nil {
				return
			}
			if !bytes.Equal(got, want.Any.GetValue()) || ver != want.Version {
				t.Errorf("joined %x (version %s), Resource's %x (version %s)", got, ver, want.Any.GetValue(), want.Version)
			}
		})
	}
}
