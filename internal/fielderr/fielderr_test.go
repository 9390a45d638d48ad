package fielderr

import (
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

func TestError(t *testing.T) {
	for _, tt := range []struct {
		err  *Error
		want string
	}{
		{New("Queue.Size", -1, "in [0, 8]"), "limiter: Queue.Size is -1, must be in [0, 8]"},
		{New("AIMDConfig.Timeout", -time.Second, ">= 0"), "limiter: AIMDConfig.Timeout is -1s, must be >= 0"},
	} {
		assert.EqualError(t, tt.err, tt.want)
	}
}

// TestFoundInAJoin: config finds each field's error among those a
// configuration's check joins.
func TestFoundInAJoin(t *testing.T) {
	err := fmt.Errorf("interceptor: %w", errors.Join(errors.New("other"), New("Queue.Target", -1, ">= 0")))
	var fe *Error
	require.ErrorAs(t, err, &fe)
	assert.Equal(t, "Queue.Target", fe.Field)
}
