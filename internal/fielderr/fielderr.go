// Package fielderr is the error of one invalid field of a limiter's
// configuration. Package limiter returns it; package config finds it with
// errors.As and names the field as the configuration file spells it.
package fielderr

import "fmt"

// An Error reports one invalid configuration value: which field, the
// value given, and what is allowed.
type Error struct {
	Field   string // the configuration field, e.g. "AIMDConfig.BackoffRatio"
	Value   any    // the rejected value
	Allowed string // the allowed range, e.g. "[0.5, 1)"
}

func (e *Error) Error() string {
	return fmt.Sprintf("limiter: %s is %v, must be %s", e.Field, e.Value, e.Allowed)
}

// New returns the Error of field, whose value is not allowed.
func New(field string, value any, allowed string) *Error {
	return &Error{Field: field, Value: value, Allowed: allowed}
}
