package resource

import (
	"strconv"
	"strings"
)

// ErrStatusSetByPilot is the detail of the error for an object given with a
// status: pilot writes status, users never do.
const ErrStatusSetByPilot = "status is set by pilot: remove it (a Service's VIPs go in spec.addresses)"

// FieldError is one problem found in one object. Object is "Kind/namespace/name"
// or, for a document whose identity is not usable yet, "source: document N".
// Field is the path inside the object ("spec.http[0].route[1].weight"; map keys in
// brackets: "metadata.labels[app]"), empty when the problem is the whole object.
type FieldError struct {
	Object string
	Field  string
	Detail string
}

// Error renders "Object: field.path: detail"; this string is the contract that
// tests, meshctl and the admin API show verbatim.
func (e *FieldError) Error() string {
	if e.Field == "" {
		return e.Object + ": " + e.Detail
	}
	return e.Object + ": " + e.Field + ": " + e.Detail
}

// Error joins every error's message with "\n", in the order they were found.
func (l ErrorList) Error() string {
	s := make([]string, len(l))
	for i, e := range l {
		s[i] = e.Error()
	}
	return strings.Join(s, "\n")
}

// Unwrap lets errors.As find a *FieldError inside the list.
func (l ErrorList) Unwrap() []error { return l }

// orNil returns l as an error, or a true nil when it is empty (never a typed nil).
func (l ErrorList) orNil() error {
	if len(l) == 0 {
		return nil
	}
	return l
}

// path is a field path under construction; "" is the object root.
type path string

func (p path) child(name string) path {
	if p == "" {
		return path(name)
	}
	return p + "." + path(name)
}

func (p path) index(i int) path { return p + "[" + path(strconv.Itoa(i)) + "]" }

func (p path) key(k string) path { return p + "[" + path(k) + "]" }

// collector gathers every error of one object; validation never stops at the first.
type collector struct {
	object string
	errs   ErrorList
}

func (c *collector) add(p path, detail string) {
	c.errs = append(c.errs, &FieldError{Object: c.object, Field: string(p), Detail: detail})
}
