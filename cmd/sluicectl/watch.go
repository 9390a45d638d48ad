package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"maps"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/durationpb"

	sluicev1 "github.com/sluice-go/sluice/proto/sluice/v1"
)

// minInterval is the shortest interval the admin service watches at
// (100 ms, the admin service's floor).
const minInterval = 100 * time.Millisecond

// clearScreen moves the cursor home and clears the terminal.
const clearScreen = "\x1b[H\x1b[2J"

func watch(ctx context.Context, args []string, out output, stderr io.Writer) error {
	var c command
	fs := newFlagSet("watch", "ADDRESS", stderr, &c.flags)
	interval := fs.Duration("interval", time.Second, "how often to redraw the table, at least 100ms")
	count := fs.Int("n", 0, "redraw this many times, then exit; 0: until Ctrl-C")
	if err := c.start(fs, args, 0); err != nil {
		return err
	}
	defer c.close()
	if *interval < minInterval {
		return usagef("-interval %v: the admin service watches at most every %v", *interval, minInterval)
	}
	if *count < 0 {
		return usagef("-n %d: give how many tables to draw, or 0 to draw until Ctrl-C", *count)
	}
	w := &watcher{cl: c.cl, out: out, interval: *interval}
	return w.run(ctx, c.flags, *count)
}

// A watcher draws the limiters of one server as its watch stream reports
// them.
type watcher struct {
	cl       *client
	out      output
	interval time.Duration

	rows   map[string]row
	lost   error     // why the stream broke, while reconnecting
	lostAt time.Time //
	// heard is when the stream last brought limiters.
	heard time.Time
}

// An event is what the stream brought: limiters that changed (all of
// them, with reset, on a new stream), or an error; fatal ends the watch.
type event struct {
	limiters []*sluicev1.LimiterStatus
	reset    bool
	at       time.Time
	err      error
	fatal    bool
}

// run draws a table when the first limiters arrive and then every
// interval, count times (0: until ctx is done, which ends it cleanly).
func (w *watcher) run(ctx context.Context, flags connFlags, count int) error {
	ctx, cancel := flags.ctx(ctx, w.cl, false)
	events := make(chan event)
	done := make(chan struct{})
	go func() {
		defer close(done)
		w.receive(ctx, events)
	}()
	defer func() {
		cancel()
		<-done
	}()
	tick := time.NewTicker(w.interval)
	defer tick.Stop()
	drawn := 0
	for count == 0 || drawn < count {
		select {
		case <-ctx.Done():
			return nil // Ctrl-C
		case ev := <-events:
			if ev.fatal {
				return w.cl.explain(ev.err, "")
			}
			if ev.err != nil {
				w.lost, w.lostAt = ev.err, time.Now()
				continue
			}
			first := w.rows == nil
			w.update(ev)
			if !first {
				continue
			}
		case <-tick.C:
			if w.rows == nil {
				continue
			}
		}
		if err := w.draw(time.Now()); err != nil {
			return err
		}
		drawn++
	}
	return nil
}

// update applies what the stream brought. The server sends, once per
// interval, the limiters whose figures changed: those it leaves out have
// the counts they had, which makes their rate 0 since the last report.
// Rates are not carried over a lost connection: the server may have
// restarted.
func (w *watcher) update(ev event) {
	carry := !ev.reset || w.lost == nil
	next := make(map[string]row, len(w.rows))
	if !ev.reset {
		maps.Copy(next, w.rows)
	}
	for _, l := range ev.limiters {
		next[l.GetName()] = row{LimiterStatus: l, at: ev.at}
	}
	for name, r := range next {
		r.countsAt, r.rate = ev.at, nil
		if p, ok := w.rows[name]; ok && carry {
			r.rate = rateSince(p, r)
		}
		next[name] = r
	}
	w.rows, w.heard = next, ev.at
	if ev.reset {
		w.lost = nil
	}
}

// draw writes one table: in place on a terminal, after the last one
// otherwise.
func (w *watcher) draw(now time.Time) error {
	if w.out.tty {
		fmt.Fprint(w.out.w, clearScreen)
	}
	fmt.Fprintf(w.out.w, "sluicectl watch %s  %s  every %v  %d limiters\n", w.cl.addr, now.Format(time.TimeOnly), w.interval, len(w.rows))
	if w.lost != nil {
		fmt.Fprintf(w.out.w, "connection lost at %s, reconnecting (the figures are from before): %s\n",
			w.lostAt.Format(time.TimeOnly), status.Convert(w.lost).Message())
	}
	fmt.Fprintln(w.out.w)
	// The server sends what changed every interval: silence for two
	// (one, and room for the message to come) means no count moved.
	quiet := w.lost == nil && now.Sub(w.heard) > 2*w.interval
	rows := make([]row, 0, len(w.rows))
	for _, r := range w.rows {
		if quiet && r.AdmittedTotal != nil && r.RejectedTotal != nil {
			r.rate = &rates{}
		}
		rows = append(rows, r)
	}
	if err := writeTable(w.out.w, rows, now, perSec); err != nil {
		return err
	}
	if !w.out.tty {
		fmt.Fprintln(w.out.w)
	}
	return nil
}

// receive watches the server until ctx is done, sending what it reports
// to events. Once a stream has worked, it watches again whenever one ends:
// at once when the server closed it (the end of its lifetime,
// admin.WithWatchLifetime), as soon as the connection is back when the
// server went away (a restart). Errors that another try cannot mend (no
// admin service, not authorized) and a server never reached end it.
func (w *watcher) receive(ctx context.Context, events chan<- event) {
	send := func(ev event) bool {
		select {
		case events <- ev:
			return true
		case <-ctx.Done():
			return false
		}
	}
	req := &sluicev1.WatchLimitsRequest{Interval: durationpb.New(w.interval)}
	connected := false
	for {
		got := false
		// Once connected, wait for the connection to come back rather
		// than fail while the server restarts.
		stream, err := w.cl.WatchLimits(ctx, req, grpc.WaitForReady(connected))
		for err == nil {
			var m *sluicev1.WatchLimitsResponse
			if m, err = stream.Recv(); err == nil {
				if !send(event{limiters: m.GetLimiters(), reset: !got, at: time.Now()}) {
					return
				}
				got, connected = true, true
			}
		}
		switch {
		case ctx.Err() != nil:
			return
		case errors.Is(err, io.EOF):
			// The server ended the watch; watch again.
		case connected && status.Code(err) == codes.Unavailable:
			if !send(event{err: err}) {
				return
			}
		default:
			send(event{err: err, fatal: true})
			return
		}
		if !got {
			// This stream brought nothing: wait before the next, so that
			// a server that ends every watch at once is not hammered.
			t := time.NewTimer(w.interval)
			select {
			case <-ctx.Done():
				t.Stop()
				return
			case <-t.C:
			}
		}
	}
}
