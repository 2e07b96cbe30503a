// Package runtimetest has helpers for tests of the sidecar runtime and its drills.
package runtimetest

import (
	"bytes"
	"errors"
	"fmt"
	"os"
)

// AlterOneByte changes one byte of a persisted last-known-good file: a base64
// character inside the first resource's value, so the file still decodes and
// only the content hash check can catch it.
func AlterOneByte(path string) error {
	b, err := os.ReadFile(path)
	if err != nil {
		return err
	}
	const key = `"Value":"`
	i := bytes.Index(b, []byte(key))
	if i < 0 || i+len(key)+8 >= len(b) {
		return errors.New("alter last-known-good: no resource value in " + path)
	}
	i += len(key) + 4
	if b[i] == 'A' {
		b[i] = 'B'
	} else {
		b[i] = 'A'
	}
	if err := os.WriteFile(path, b, 0o600); err != nil {
		return fmt.Errorf("alter last-known-good: %w", err)
	}
	return nil
}
