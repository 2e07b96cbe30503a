package sign

import (
	"crypto/ed25519"
	"crypto/sha256"
	"crypto/x509"
	"encoding/hex"
	"errors"
	"fmt"

	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/types/known/anypb"

	"github.com/weft-mesh/weft/certs/manifest"
	"github.com/weft-mesh/weft/pilot/xds/snapshot"
)

// A manifest is the same content and chain for every sidecar of a scope and a
// binding of each sidecar's own. Pilot assembles one per sidecar per change, so
// the parts are encoded once (the content per scope snapshot, the chain per
// certificate, the binding when it is signed) and Join puts a manifest together
// by concatenation: the same bytes as Resource, which encodes the whole
// SignedManifest per call (its fields in number order, as protobuf's
// deterministic encoding writes them: key_id, content and content_signature,
// then binding and binding_signature, then the chain).

// SignedManifest's field numbers (certs/manifest/manifestpb).
const (
	fieldKeyID            = 3
	fieldContent          = 4
	fieldContentSignature = 5
	fieldBinding          = 6
	fieldBindingSignature = 7
	fieldPublisherChain   = 8
)

// ContentPart is a signed content statement encoded as its part of a manifest.
type ContentPart struct {
	keyID string
	b     []byte
}

// EncodeContent encodes content's fields of the manifest.
func EncodeContent(content *manifest.Signed) (ContentPart, error) {
	if content == nil {
		return ContentPart{}, errors.New("assemble manifest: content and binding are required")
	}
	b := appendString([]byte{}, fieldKeyID, content.KeyID) // non-nil: present even if empty
	b = appendBytes(b, fieldContent, content.Body)
	b = appendBytes(b, fieldContentSignature, content.Signature)
	return ContentPart{keyID: content.KeyID, b: b}, nil
}

// BindingPart is a signed binding encoded as its part of a manifest.
type BindingPart struct {
	keyID string
	b     []byte
}

// EncodeBinding encodes binding's fields of the manifest.
func EncodeBinding(binding *manifest.Signed) (BindingPart, error) {
	if binding == nil {
		return BindingPart{}, errors.New("assemble manifest: content and binding are required")
	}
	b := appendBytes([]byte{}, fieldBinding, binding.Body)
	b = appendBytes(b, fieldBindingSignature, binding.Signature)
	return BindingPart{keyID: binding.KeyID, b: b}, nil
}

// ChainPart is a publisher certificate chain encoded as its part of a
// manifest, checked as manifest.Assemble checks it.
type ChainPart struct {
	keyID  string // of the leaf's key; "" without a chain
	serial string // the leaf's, for errors
	b      []byte
}

// EncodeChain encodes and checks chain (leaf first; none for a key without a
// certificate).
func EncodeChain(chain ...*x509.Certificate) (ChainPart, error) {
	if len(chain) > manifest.MaxChainCerts {
		return ChainPart{}, fmt.Errorf("assemble manifest: publisher chain of %d certificates, limit %d", len(chain), manifest.MaxChainCerts)
	}
	var p ChainPart
	for i, c := range chain {
		if c == nil || len(c.Raw) == 0 {
			return ChainPart{}, fmt.Errorf("assemble manifest: publisher chain[%d]: empty certificate", i)
		}
		p.b = appendBytes(p.b, fieldPublisherChain, c.Raw)
	}
	if len(chain) > 0 {
		pub, ok := chain[0].PublicKey.(ed25519.PublicKey)
		if !ok {
			return ChainPart{}, fmt.Errorf("assemble manifest: publisher certificate serial %s: key is %T, want Ed25519", chain[0].SerialNumber, chain[0].PublicKey)
		}
		p.keyID, p.serial = manifest.KeyID(pub), chain[0].SerialNumber.String()
	}
	return p, nil
}

// Join assembles the manifest resource from its parts: Resource(content,
// binding, chain...) for the parts' sources, with the same checks.
func Join(content ContentPart, binding BindingPart, chain ChainPart) (snapshot.Resource, error) {
	switch {
	case content.b == nil || binding.b == nil:
		return snapshot.Resource{}, errors.New("assemble manifest: content and binding are required")
	case content.keyID != binding.keyID:
		return snapshot.Resource{}, fmt.Errorf("assemble manifest: content signed by key %s, binding by %s", content.keyID, binding.keyID)
	case chain.keyID != "" && chain.keyID != content.keyID:
		return snapshot.Resource{}, fmt.Errorf("assemble manifest: publisher certificate serial %s holds key %s, parts signed by %s", chain.serial, chain.keyID, content.keyID)
	}
	v := make([]byte, 0, len(content.b)+len(binding.b)+len(chain.b))
	v = append(append(append(v, content.b...), binding.b...), chain.b...)
	sum := sha256.Sum256(v)
	return snapshot.Resource{Name: manifest.Name, Any: &anypb.Any{TypeUrl: manifest.TypeURL, Value: v}, Version: hex.EncodeToString(sum[:8])}, nil
}

// appendString and appendBytes write a proto3 field as protobuf does: an
// empty one is left out.
func appendString(b []byte, num protowire.Number, v string) []byte {
	if v == "" {
		return b
	}
	b = protowire.AppendTag(b, num, protowire.BytesType)
	return protowire.AppendString(b, v)
}

func appendBytes(b []byte, num protowire.Number, v []byte) []byte {
	if len(v) == 0 {
		return b
	}
	b = protowire.AppendTag(b, num, protowire.BytesType)
	return protowire.AppendBytes(b, v)
}
