package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"strconv"
	"time"

	"google.golang.org/protobuf/types/known/durationpb"

	sluicev1 "github.com/sluice-go/sluice/proto/sluice/v1"
)

// A command is what the one-shot commands share: the connection flags and
// the client, once parsed.
type command struct {
	flags connFlags
	cl    *client
	args  []string // after ADDRESS
}

// start parses args (ADDRESS and want more arguments) and connects.
func (c *command) start(fs *flag.FlagSet, args []string, want int) error {
	pos, err := parse(fs, args, want+1)
	if err != nil {
		return err
	}
	c.cl, err = c.flags.dial(pos[0])
	if err != nil {
		return err
	}
	c.args = pos[1:]
	return nil
}

func (c *command) close() { _ = c.cl.conn.Close() }

func list(ctx context.Context, args []string, out output, stderr io.Writer) error {
	var c command
	if err := c.start(newFlagSet("list", "ADDRESS", stderr, &c.flags), args, 0); err != nil {
		return err
	}
	defer c.close()
	ctx, cancel := c.flags.ctx(ctx, c.cl, true)
	defer cancel()
	resp, err := c.cl.ListLimits(ctx, &sluicev1.ListLimitsRequest{})
	if err != nil {
		return c.cl.explain(err, "")
	}
	now := time.Now()
	rows := make([]row, len(resp.GetLimiters()))
	for i, l := range resp.GetLimiters() {
		rows[i] = row{LimiterStatus: l, at: now}
	}
	return writeTable(out.w, rows, now, totals)
}

func override(ctx context.Context, args []string, out output, stderr io.Writer) error {
	var c command
	fs := newFlagSet("override", "ADDRESS NAME LIMIT -for DURATION", stderr, &c.flags)
	ttl := fs.Duration("for", 0, "how long the override holds (required, at most 24h), such as 10m")
	if err := c.start(fs, args, 2); err != nil {
		return err
	}
	defer c.close()
	name, err := limiterName(c.args[0])
	if err != nil {
		return err
	}
	limit, err := strconv.ParseInt(c.args[1], 10, 32)
	if err != nil || limit < 0 {
		return usagef("LIMIT %q: want a whole number of calls at once, 0 or more (0 rejects every call)", c.args[1])
	}
	if *ttl <= 0 {
		return usagef("override needs -for DURATION, how long the limit holds, such as -for 10m (at most 24h)")
	}
	ctx, cancel := c.flags.ctx(ctx, c.cl, true)
	defer cancel()
	before := c.find(ctx, name)
	resp, err := c.cl.SetOverride(ctx, &sluicev1.SetOverrideRequest{Name: name, Limit: int32(limit), Ttl: durationpb.New(*ttl)})
	if err != nil {
		return c.cl.explain(err, name)
	}
	after := resp.GetLimiter()
	fmt.Fprintf(out.w, "%s: limit %s%d, pinned for %v", name, was(before, before.GetLimit()), after.GetLimit(), *ttl)
	if before.GetOverrideRemaining() != nil {
		fmt.Fprintf(out.w, " (replaces an override with %v left)", remaining(before.GetOverrideRemaining().AsDuration()))
	}
	fmt.Fprintln(out.w, "; then it adapts again from there")
	return nil
}

func clearOverride(ctx context.Context, args []string, out output, stderr io.Writer) error {
	var c command
	if err := c.start(newFlagSet("clear", "ADDRESS NAME", stderr, &c.flags), args, 1); err != nil {
		return err
	}
	defer c.close()
	name, err := limiterName(c.args[0])
	if err != nil {
		return err
	}
	ctx, cancel := c.flags.ctx(ctx, c.cl, true)
	defer cancel()
	before := c.find(ctx, name)
	resp, err := c.cl.ClearOverride(ctx, &sluicev1.ClearOverrideRequest{Name: name})
	if err != nil {
		return c.cl.explain(err, name)
	}
	after := resp.GetLimiter()
	if before != nil && before.GetOverrideRemaining() == nil {
		fmt.Fprintf(out.w, "%s: had no override; limit %d, adapting\n", name, after.GetLimit())
		return nil
	}
	fmt.Fprintf(out.w, "%s: override cleared", name)
	if before != nil {
		fmt.Fprintf(out.w, " (%v was left)", remaining(before.GetOverrideRemaining().AsDuration()))
	}
	fmt.Fprintf(out.w, "; limit %s%d, adapting again\n", was(before, before.GetLimit()), after.GetLimit())
	return nil
}

func dryRun(ctx context.Context, args []string, out output, stderr io.Writer) error {
	var c command
	if err := c.start(newFlagSet("dry-run", "ADDRESS NAME on|off", stderr, &c.flags), args, 2); err != nil {
		return err
	}
	defer c.close()
	name, err := limiterName(c.args[0])
	if err != nil {
		return err
	}
	var on bool
	switch c.args[1] {
	case "on":
		on = true
	case "off":
	default:
		return usagef("dry-run %s %q: want on (record decisions, enforce none) or off (enforce them)", name, c.args[1])
	}
	ctx, cancel := c.flags.ctx(ctx, c.cl, true)
	defer cancel()
	before := c.find(ctx, name)
	resp, err := c.cl.SetDryRun(ctx, &sluicev1.SetDryRunRequest{Name: name, DryRun: on})
	if err != nil {
		return c.cl.explain(err, name)
	}
	state := onOff(resp.GetLimiter().GetDryRun())
	switch {
	case before == nil:
		fmt.Fprintf(out.w, "%s: dry run %s", name, state)
	case before.GetDryRun() == on:
		fmt.Fprintf(out.w, "%s: dry run already %s, unchanged", name, state)
	default:
		fmt.Fprintf(out.w, "%s: dry run %s -> %s", name, onOff(before.GetDryRun()), state)
	}
	if on {
		fmt.Fprintln(out.w, " (decisions recorded, none enforced, until the server's configuration is next reloaded)")
	} else {
		fmt.Fprintln(out.w, " (decisions enforced)")
	}
	return nil
}

// find returns the limiter named name before a change, to say what the
// change did, or nil if it cannot be listed (a server may let this
// client change limits but not list them; the change then says why it
// failed, if it does).
func (c *command) find(ctx context.Context, name string) *sluicev1.LimiterStatus {
	resp, err := c.cl.ListLimits(ctx, &sluicev1.ListLimitsRequest{})
	if err != nil {
		return nil
	}
	for _, l := range resp.GetLimiters() {
		if l.GetName() == name {
			return l
		}
	}
	return nil
}

// was renders the "before ->" part of a change, empty when the state
// before is unknown.
func was(before *sluicev1.LimiterStatus, v int32) string {
	if before == nil {
		return ""
	}
	return fmt.Sprintf("%d -> ", v)
}

func onOff(b bool) string {
	if b {
		return "on"
	}
	return "off"
}
