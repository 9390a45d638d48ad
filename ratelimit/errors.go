package ratelimit

import (
	"errors"
	"fmt"
)

// ErrEmptyKey is returned by Keyed.Allow for the empty key. An empty key
// almost always means the caller's identity could not be found (no peer
// address, a missing header), and lumping all such callers into one
// shared budget would let one of them starve the others silently; the
// caller decides instead, for example by rejecting or by using a fallback
// key of its own.
var ErrEmptyKey = errors.New("ratelimit: empty rate limit key")

// badArg reports one invalid argument of a constructor or setter: what it
// was, the value given, and what is allowed. Constructors join one per
// wrong argument, so that a caller fixes them all at once.
func badArg(what string, value any, allowed string) error {
	return fmt.Errorf("ratelimit: %s is %v, must be %s", what, value, allowed)
}
