package bench

import (
	"context"
	"errors"
	"fmt"
)

// A Guard decides whether a call may proceed: the common face of the
// libraries compared here.
//
// Admit never waits. It either admits the call, returning finish, or
// rejects it with an error that wraps ErrRejected (and the peer's own
// rejection error, when it has one). The caller must call finish exactly
// once, when the call ends, with the call's error (nil for success); the
// Guard turns that error into the outcome its library expects.
//
// ctx is the call's context. The sluice and failsafe adapters look at it
// when the call finishes, to tell a call that ran out of time or was
// cancelled; the others ignore it.
//
// Guards are safe for concurrent use.
type Guard interface {
	Admit(ctx context.Context) (finish func(err error), err error)
}

// ErrRejected is wrapped by every error a Guard's Admit returns.
var ErrRejected = errors.New("bench: call rejected")

// A Peer names a Guard constructor.
type Peer struct {
	// Name is short, lower case and stable: benchmarks use it as the name
	// of their sub-benchmarks, so benchstat can line results up by it.
	Name string
	// New returns a fresh Guard, sharing no state with earlier ones other
	// than what the library keeps globally (see the package doc).
	New func() Guard
}

// StaticLimit is the size of the two static semaphores in Peers. It
// matches SluiceMinLimit, the smallest limit the sluice peer can reach, so
// that neither baseline admits more than sluice always does.
const StaticLimit = 64

// Peers returns every compared library, sluice first, then the adaptive
// peers, then the static baselines, each configured as the package doc
// describes.
func Peers() []Peer {
	return []Peer{
		{"sluice", func() Guard { return NewSluice() }},
		{"failsafe", func() Guard { return NewFailsafe() }},
		{"gozero", func() Guard { return NewGoZero() }},
		{"kratos", func() Guard { return NewKratos() }},
		{"xsemaphore", func() Guard { return NewXSemaphore(StaticLimit) }},
		{"chan", func() Guard { return NewChan(StaticLimit) }},
	}
}

// rejectedBy returns the error Admit reports when a peer rejects a call
// with peerErr: it matches both ErrRejected and peerErr with errors.Is.
// Adapters build theirs once, so that a rejection allocates nothing.
func rejectedBy(peerErr error) error {
	return fmt.Errorf("%w: %w", ErrRejected, peerErr)
}
