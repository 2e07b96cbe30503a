// Package srcsum computes what the committed eBPF objects of ebpf/bpf were
// built from: the bpf2go command line (the go:generate line of gen.go) and the
// C source. gensum records it at generation; ebpf/bpf's test recomputes it.
package srcsum

import (
	"bufio"
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"strings"
)

// GeneratePrefix starts the bpf2go line in gen.go.
const GeneratePrefix = "//go:generate go tool bpf2go "

// Command returns the single bpf2go go:generate line of genGo.
func Command(genGo []byte) (string, error) {
	var found []string
	sc := bufio.NewScanner(bytes.NewReader(genGo))
	for sc.Scan() {
		if line := strings.TrimSpace(sc.Text()); strings.HasPrefix(line, GeneratePrefix) {
			found = append(found, line)
		}
	}
	if err := sc.Err(); err != nil {
		return "", fmt.Errorf("srcsum: read gen.go: %w", err)
	}
	switch len(found) {
	case 0:
		return "", errors.New("srcsum: gen.go has no " + strings.TrimSpace(GeneratePrefix) + " line")
	case 1:
		return found[0], nil
	default:
		return "", fmt.Errorf("srcsum: gen.go has %d bpf2go lines, want 1", len(found))
	}
}

// Source is the hex SHA-256 of the bpf2go line and the C source.
func Source(genGo, cSource []byte) (string, error) {
	cmd, err := Command(genGo)
	if err != nil {
		return "", err
	}
	h := sha256.New()
	fmt.Fprintf(h, "%s\n%d\n", cmd, len(cSource))
	h.Write(cSource)
	return hex.EncodeToString(h.Sum(nil)), nil
}

// Bytes is the hex SHA-256 of b.
func Bytes(b []byte) string {
	s := sha256.Sum256(b)
	return hex.EncodeToString(s[:])
}
