package svid

import (
	"bytes"
	"crypto"
	"crypto/x509"
	"encoding/pem"
	"errors"
	"fmt"
)

// MaxFileBytes bounds what Parse reads: a chain of a few certificates and a
// key in PEM is under 8 KiB.
const MaxFileBytes = 64 << 10

// MaxChain bounds the certificates of a parsed chain (leaf and intermediates).
const MaxChain = 8

// PEM block types of Marshal.
const (
	blockCert = "CERTIFICATE"
	blockKey  = "PRIVATE KEY" // PKCS #8
)

// Marshal encodes s as PEM: its chain, leaf first, as CERTIFICATE blocks, then
// its private key as a PKCS #8 PRIVATE KEY block. The result is secret.
func Marshal(s *SVID) ([]byte, error) {
	if s == nil {
		return nil, errors.New("svid: marshal: no SVID")
	}
	kd, err := x509.MarshalPKCS8PrivateKey(s.Cert.PrivateKey)
	if err != nil {
		return nil, fmt.Errorf("svid: marshal key of %s: %w", s.ID, err)
	}
	var b bytes.Buffer
	for _, der := range s.Cert.Certificate {
		_ = pem.Encode(&b, &pem.Block{Type: blockCert, Bytes: der})
	}
	_ = pem.Encode(&b, &pem.Block{Type: blockKey, Bytes: kd})
	return b.Bytes(), nil
}

// Parse decodes what Marshal wrote and checks it as New does (one SPIFFE ID,
// the key is the leaf's). Anything else in b is refused: another block type,
// a second key, trailing data, more than MaxFileBytes or MaxChain.
func Parse(b []byte) (*SVID, error) {
	if len(b) > MaxFileBytes {
		return nil, fmt.Errorf("svid: %d bytes, over the bound of %d", len(b), MaxFileBytes)
	}
	var chain []*x509.Certificate
	var key crypto.Signer
	rest := b
	for {
		var blk *pem.Block
		blk, rest = pem.Decode(rest)
		if blk == nil {
			break
		}
		switch {
		case blk.Type == blockCert && key == nil:
			if len(chain) == MaxChain {
				return nil, fmt.Errorf("svid: more than %d certificates", MaxChain)
			}
			c, err := x509.ParseCertificate(blk.Bytes)
			if err != nil {
				return nil, fmt.Errorf("svid: certificate %d: %w", len(chain), err)
			}
			chain = append(chain, c)
		case blk.Type == blockKey && key == nil:
			k, err := x509.ParsePKCS8PrivateKey(blk.Bytes)
			if err != nil {
				return nil, fmt.Errorf("svid: private key: %w", err)
			}
			s, ok := k.(crypto.Signer)
			if !ok {
				return nil, fmt.Errorf("svid: private key of type %T cannot sign", k)
			}
			key = s
		default:
			return nil, fmt.Errorf("svid: unexpected PEM block %q (want CERTIFICATE blocks, then one PRIVATE KEY)", blk.Type)
		}
	}
	if len(bytes.TrimSpace(rest)) != 0 {
		return nil, fmt.Errorf("svid: %d bytes of trailing data that is not PEM", len(rest))
	}
	if key == nil {
		return nil, errors.New("svid: no PRIVATE KEY block")
	}
	return New(chain, key)
}
