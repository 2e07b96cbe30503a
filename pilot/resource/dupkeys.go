package resource

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
)

// CheckJSON walks a whole JSON body (an apply envelope, a list) without
// building it and refuses what encoding/json would silently accept: a key
// repeated in one object anywhere in the body (encoding/json keeps the last, so
// {"items": A, "items": B} would drop A), nesting deeper than MaxNestingDepth,
// and data after the top-level value. The error names the path of the repeat.
func CheckJSON(data []byte) error {
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.UseNumber()
	if err := checkValue(dec, "", 0); err != nil {
		return err
	}
	if _, err := dec.Token(); err != io.EOF {
		return errors.New("unexpected data after the top-level value")
	}
	return nil
}

func checkValue(dec *json.Decoder, p path, depth int) error {
	if depth > MaxNestingDepth {
		return fmt.Errorf("%s: nested deeper than %d levels", orRoot(p), MaxNestingDepth)
	}
	tok, err := dec.Token()
	if err == io.EOF {
		return io.ErrUnexpectedEOF
	}
	if err != nil {
		return err
	}
	switch tok {
	case json.Delim('{'):
		seen := map[string]struct{}{}
		for dec.More() {
			kt, err := dec.Token()
			if err == io.EOF {
				return io.ErrUnexpectedEOF
			}
			if err != nil {
				return err
			}
			k, _ := kt.(string)
			if _, dup := seen[k]; dup {
				return fmt.Errorf("%s: duplicate key", p.child(k))
			}
			seen[k] = struct{}{}
			if err := checkValue(dec, p.child(k), depth+1); err != nil {
				return err
			}
		}
		return closeToken(dec) // '}'
	case json.Delim('['):
		for i := 0; dec.More(); i++ {
			if err := checkValue(dec, p.index(i), depth+1); err != nil {
				return err
			}
		}
		return closeToken(dec) // ']'
	}
	return nil
}

// closeToken reads an object's or list's closing delimiter; the body ending
// before it is a truncation.
func closeToken(dec *json.Decoder) error {
	if _, err := dec.Token(); err == io.EOF {
		return io.ErrUnexpectedEOF
	} else {
		return err
	}
}
