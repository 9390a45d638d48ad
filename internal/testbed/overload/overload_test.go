package overload

import (
	"context"
	"errors"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/sluice-go/sluice/internal/testbed/backend"
	"github.com/sluice-go/sluice/internal/testbed/loadgen"
	"github.com/sluice-go/sluice/internal/testbed/testpb"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

func TestClassify(t *testing.T) {
	tests := []struct {
		err  error
		want loadgen.Result
	}{
		{nil, loadgen.OK},
		{status.Error(codes.ResourceExhausted, "shed"), loadgen.Rejected},
		{status.Error(codes.DeadlineExceeded, "late"), loadgen.DeadlineExceeded},
		{status.Error(codes.Unavailable, "down"), loadgen.Failed},
		{errors.New("plain"), loadgen.Failed},
	}
	for _, tt := range tests {
		assert.Equal(t, tt.want, Classify(tt.err), "%v", tt.err)
	}
}

func TestServiceOverBufconn(t *testing.T) {
	be, err := backend.New("fifo", 1, time.Millisecond, backend.Constant, 1)
	require.NoError(t, err)
	client, stop, err := testpb.ServeBufconn(Service(be), nil, nil)
	require.NoError(t, err)
	defer stop()
	_, err = client.Unary(context.Background(), &testpb.UnaryRequest{})
	assert.Equal(t, loadgen.OK, Classify(err))

	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	_, err = client.Unary(ctx, &testpb.UnaryRequest{})
	assert.Equal(t, codes.Canceled, status.Code(err))
}

// TestLagMonitor: in a bubble whose timers fire on time, every second
// measured has a lag of 0, and Stop ends the monitor's goroutine.
func TestLagMonitor(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		m := StartLagMonitor(time.Now())
		time.Sleep(2500 * time.Millisecond) // advances the bubble's clock
		assert.Equal(t, []time.Duration{0, 0, 0}, m.SoFar())
		assert.Equal(t, []time.Duration{0, 0, 0}, m.Stop())
	})
}
