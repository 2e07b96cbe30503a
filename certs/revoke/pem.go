package revoke

import (
	"bytes"
	"encoding/pem"
	"fmt"
)

const pemType = "X509 CRL"

func pemEncode(der []byte) []byte {
	return pem.EncodeToMemory(&pem.Block{Type: pemType, Bytes: der})
}

func pemDecode(b []byte) ([]byte, error) {
	if len(b) > 2*MaxBytes {
		return nil, fmt.Errorf("CRL: %d bytes of PEM, over the bound of %d", len(b), 2*MaxBytes)
	}
	blk, rest := pem.Decode(b)
	if blk == nil {
		return nil, fmt.Errorf("CRL: no PEM block")
	}
	if blk.Type != pemType {
		return nil, fmt.Errorf("CRL: PEM type %q, want %q", blk.Type, pemType)
	}
	if len(bytes.TrimSpace(rest)) != 0 {
		return nil, fmt.Errorf("CRL: %d bytes after the PEM block", len(rest))
	}
	return blk.Bytes, nil
}
