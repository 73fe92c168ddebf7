// Package opterr is the error a library returns for an option out of its
// range, in the library's own terms: the field of its Options struct. The
// caller that set the option names it its own way; the CLI turns Field into
// the flag (TTFTMode into --ttft-mode), so libraries never speak of flags.
package opterr

import (
	"errors"
	"fmt"
)

// Error is an option given a value the library cannot use.
type Error struct {
	// Field is the option's name in the library's Options, e.g. "TTFTMode".
	Field string
	// Value is the value given, formatted, or "" where there is none to show.
	Value string
	// Reason says what the option accepts, e.g. "use first-content or first-chunk".
	Reason string
}

func (e *Error) Error() string {
	if e.Value == "" {
		return e.Field + ": " + e.Reason
	}
	return e.Field + " " + e.Value + ": " + e.Reason
}

// New returns an *Error for field; value is formatted with %v (strings
// quoted), nil for none.
func New(field string, value any, reason string, args ...any) error {
	v := ""
	switch x := value.(type) {
	case nil:
	case string:
		v = fmt.Sprintf("%q", x)
	default:
		v = fmt.Sprint(x)
	}
	return &Error{Field: field, Value: v, Reason: fmt.Sprintf(reason, args...)}
}

// As returns the *Error in err's chain, if any.
func As(err error) (*Error, bool) {
	var e *Error
	ok := errors.As(err, &e)
	return e, ok
}
