package redis

import (
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

// redisServer is a redis-server the tests start on a free loopback port,
// with no persistence, and kill at cleanup.
type redisServer struct {
	addr string
	cmd  *exec.Cmd
	done chan struct{}
}

// startRedis starts a redis-server for t. Without one, the test is
// skipped, unless CI is set: CI must run these tests, so it fails.
func startRedis(t testing.TB) *redisServer {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	addr := l.Addr().String()
	require.NoError(t, l.Close())
	s := &redisServer{addr: addr}
	if err := s.start(); err != nil {
		if os.Getenv("CI") != "" {
			t.Fatalf("redis-server cannot be started, and CI must run these tests: %v", err)
		}
		t.Skipf("redis-server cannot be started (install it, e.g. apt-get install redis-server): %v", err)
	}
	t.Cleanup(s.stop)
	return s
}

// start runs redis-server and waits until it answers PING.
func (s *redisServer) start() error {
	path, err := exec.LookPath("redis-server")
	if err != nil {
		return err
	}
	_, port, _ := net.SplitHostPort(s.addr)
	s.cmd = exec.Command(path, "--port", port, "--bind", "127.0.0.1", "--save", "", "--appendonly", "no")
	if err := s.cmd.Start(); err != nil {
		return err
	}
	s.done = make(chan struct{})
	go func(cmd *exec.Cmd, done chan struct{}) {
		_ = cmd.Wait()
		close(done)
	}(s.cmd, s.done)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	c := goredis.NewClient(&goredis.Options{Addr: s.addr, MaxRetries: -1, ContextTimeoutEnabled: true})
	defer c.Close()
	if err := poll(ctx, func() bool { return c.Ping(ctx).Err() == nil }); err != nil {
		s.stop()
		return fmt.Errorf("redis-server on %s did not answer PING: %w", s.addr, err)
	}
	return nil
}

// pause stops the server's process (SIGSTOP), so that it accepts
// connections but answers nothing, until the test ends.
func (s *redisServer) pause(t testing.TB) {
	t.Helper()
	require.NoError(t, s.cmd.Process.Signal(syscall.SIGSTOP))
	stat := fmt.Sprintf("/proc/%d/stat", s.cmd.Process.Pid)
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	require.NoError(t, poll(ctx, func() bool {
		b, err := os.ReadFile(stat)
		// The state follows the command name in parentheses: T is stopped.
		i := strings.LastIndexByte(string(b), ')')
		return err == nil && i > 0 && i+2 < len(b) && b[i+2] == 'T'
	}), "redis-server stops")
}

// stop kills the server and waits for it to exit.
func (s *redisServer) stop() {
	if s.cmd == nil {
		return
	}
	_ = s.cmd.Process.Kill()
	<-s.done
	s.cmd = nil
}

// client returns a client of the server for t, closed at cleanup.
func (s *redisServer) client(t testing.TB) *goredis.Client {
	c := goredis.NewClient(&goredis.Options{Addr: s.addr, ContextTimeoutEnabled: true, MaxRetries: -1})
	t.Cleanup(func() { _ = c.Close() })
	return c
}

// poll calls cond every millisecond until it holds or ctx ends.
func poll(ctx context.Context, cond func() bool) error {
	tick := time.NewTicker(time.Millisecond)
	defer tick.Stop()
	for !cond() {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-tick.C:
		}
	}
	return nil
}

// redisNow reads Redis's clock in µs.
func redisNow(t testing.TB, c *goredis.Client) int64 {
	t.Helper()
	tm, err := c.Time(t.Context()).Result()
	require.NoError(t, err)
	return tm.UnixMicro()
}
