package limiter

import (
	"errors"
	"fmt"

	"github.com/sluice-go/sluice/internal/fielderr"
)

// ErrLimitExceeded is returned by Acquire when no permit is free and the
// wait queue is full or disabled, and to callers still queued when the
// limit is set to 0. Callers should reject the request rather than retry
// at once.
var ErrLimitExceeded = errors.New("limiter: concurrency limit exceeded")

// checkLimits validates the usual 0 < min <= initial <= max <= MaxLimit
// triple shared by the algorithm configurations.
func checkLimits(kind string, initial, minimum, maximum int) error {
	var errs []error
	if minimum < 1 || minimum > MaxLimit {
		errs = append(errs, fielderr.New(kind+".MinLimit", minimum, fmt.Sprintf("in [1, %d]", MaxLimit)))
	}
	if maximum < 1 || maximum > MaxLimit {
		errs = append(errs, fielderr.New(kind+".MaxLimit", maximum, fmt.Sprintf("in [1, %d]", MaxLimit)))
	} else if minimum > maximum {
		errs = append(errs, fielderr.New(kind+".MinLimit", minimum, fmt.Sprintf("<= MaxLimit (%d)", maximum)))
	}
	if initial < minimum || initial > maximum {
		errs = append(errs, fielderr.New(kind+".InitialLimit", initial, fmt.Sprintf("in [MinLimit, MaxLimit] = [%d, %d]", minimum, maximum)))
	}
	return errors.Join(errs...)
}
