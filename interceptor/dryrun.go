package interceptor

import (
	"context"
	"fmt"
	"log/slog"
	"time"

	"google.golang.org/grpc/status"

	"github.com/sluice-go/sluice/limiter"
)

// admitDry decides a call of a limiter in a dry run: the rates, then the
// concurrency limit, as admit would, but never waiting. A call that would
// have been rejected is recorded (with sluice.dry_run=true) and logged,
// and goes on without a permit, so it neither counts in flight nor feeds
// the algorithm, exactly as a rejected call would not have.
func (c *core) admitDry(ctx context.Context, r *route) limiter.Token {
	tok, _, rej := c.take(ctx, r, false)
	if rej != nil {
		// Recorded as a rejection, marked as the dry run's by rejectedFor.
		c.logDry(ctx, r, status.Convert(rej.err).Message())
	}
	return tok
}

// dryLogEvery is the shortest interval between two log lines of one
// limiter's dry run: a dry run under overload would otherwise log every
// call.
const dryLogEvery = time.Second

// logDry logs a dry-run rejection, at most once per dryLogEvery per
// limiter, with how many happened since the last line.
func (c *core) logDry(ctx context.Context, r *route, what string) {
	g := r.gate
	g.dryCount.Add(1)
	now := time.Now().UnixNano()
	last := g.dryLog.Load()
	if now-last < int64(dryLogEvery) || !g.dryLog.CompareAndSwap(last, now) {
		return
	}
	n := g.dryCount.Swap(0)
	l := r.t.logger
	if l == nil {
		l = slog.Default()
	}
	l.LogAttrs(ctx, slog.LevelInfo, "sluice dry run: would have rejected",
		slog.String("side", c.side), slog.String("method", r.method), slog.String("limiter", g.name),
		slog.String("why", what), slog.Int64("rejections", n))
}

// setDryRun implements Server.SetDryRun.
func (c *core) setDryRun(name string, on bool) error {
	g := c.gateNamed(name)
	if g == nil {
		return fmt.Errorf("%w: %q", ErrUnknownLimiter, name)
	}
	g.dryRun.Store(on)
	return nil
}
