// Package overload holds the pieces shared by the overload runs of the
// demo (examples/demo), the fleet (internal/testbed/fleet, examples/fleet) and the
// peer comparison (bench): a gRPC service in front of a simulated backend,
// the client side's classification of results, and the measurements around
// a run (CPU, timer lag, load average).
package overload

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/connectivity"
	"google.golang.org/grpc/status"

	"github.com/sluice-go/sluice/internal/testbed/backend"
	"github.com/sluice-go/sluice/internal/testbed/loadgen"
	"github.com/sluice-go/sluice/internal/testbed/testpb"
)

// Service returns a test service whose Unary handler waits for be. A
// context error goes back as it is: grpc-go sends it with its code, and a
// protection's classification of the handler's error sees it unconverted.
func Service(be backend.Backend) *testpb.Service {
	return &testpb.Service{UnaryFunc: func(ctx context.Context, _ *testpb.UnaryRequest) (*testpb.UnaryResponse, error) {
		if err := be.Do(ctx); err != nil {
			return nil, err
		}
		return &testpb.UnaryResponse{}, nil
	}}
}

// Classify maps a call's gRPC status to a loadgen Result.
func Classify(err error) loadgen.Result {
	switch status.Code(err) {
	case codes.OK:
		return loadgen.OK
	case codes.ResourceExhausted:
		return loadgen.Rejected
	case codes.DeadlineExceeded:
		return loadgen.DeadlineExceeded
	}
	return loadgen.Failed
}

// Connect waits until conn is ready, so that no call of a run pays for the
// connection.
func Connect(ctx context.Context, conn *grpc.ClientConn) error {
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	conn.Connect()
	for s := conn.GetState(); s != connectivity.Ready; s = conn.GetState() {
		if !conn.WaitForStateChange(ctx, s) {
			return errors.New("could not connect to the local gRPC server")
		}
	}
	return nil
}

// An Output is one file a run writes: its name and what fills it.
type Output struct {
	Name  string
	Write func(io.Writer) error
}

// WriteOutputs creates each output in dir and says so on log.
func WriteOutputs(log io.Writer, dir string, outputs ...Output) error {
	for _, o := range outputs {
		path := filepath.Join(dir, o.Name)
		if err := writeFile(path, o.Write); err != nil {
			return fmt.Errorf("writing %s: %w", path, err)
		}
		fmt.Fprintf(log, "wrote %s\n", path)
	}
	return nil
}

// writeFile creates path and fills it with write.
func writeFile(path string, write func(io.Writer) error) error {
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	if err := write(f); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}
