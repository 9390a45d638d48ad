package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"syscall"
)

func main() {
	// Ctrl-C cancels the context: watch stops redrawing and returns, and
	// a command in flight is cancelled.
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	err := run(ctx, os.Args[1:], output{w: os.Stdout, tty: isTerminal(os.Stdout)}, os.Stderr)
	stop()
	os.Exit(exitCode(err, os.Stderr))
}

// output is where a command writes: tty says whether it is a terminal,
// which watch redraws in place.
type output struct {
	w   io.Writer
	tty bool
}

func isTerminal(f *os.File) bool {
	fi, err := f.Stat()
	return err == nil && fi.Mode()&os.ModeCharDevice != 0
}

// exitCode prints err and returns the process's exit status: 2 for a
// command line that could not be understood, 1 for any other error.
func exitCode(err error, stderr io.Writer) int {
	switch {
	case err == nil, errors.Is(err, flag.ErrHelp):
		return 0
	case errors.As(err, new(usageError)):
		fmt.Fprintf(stderr, "sluicectl: %v\n", err)
		return 2
	default:
		fmt.Fprintf(stderr, "sluicectl: %v\n", err)
		return 1
	}
}

// A usageError is a command line that could not be understood.
type usageError struct{ msg string }

func (e usageError) Error() string { return e.msg }

func usagef(format string, args ...any) error {
	return usageError{fmt.Sprintf(format, args...)}
}

const usage = `sluicectl shows and steers the limiters of a server that serves sluice's
admin service (sluice.v1.LimitsService).

Usage:
  sluicectl list     [flags] ADDRESS
  sluicectl watch    [flags] ADDRESS
  sluicectl override [flags] ADDRESS NAME LIMIT -for DURATION
  sluicectl clear    [flags] ADDRESS NAME
  sluicectl dry-run  [flags] ADDRESS NAME on|off

ADDRESS is host:port, or unix:///path/to/socket. NAME is a limiter as
list shows it ("pkg.Svc/Method", "pkg.Svc/" or "_OTHER"); a leading
slash is allowed. Flags may come before or after the arguments.

Connection flags (every command):
  -plaintext        no TLS (a Unix socket, or a test on loopback)
  -cacert FILE      the CAs that issued the server's certificate (default: the system's)
  -cert FILE        client certificate, for a server that wants mTLS
  -key FILE         the client certificate's private key
  -servername NAME  the name to verify the server's certificate against
  -H 'name: value'  a header to send with every call (repeatable)
  -timeout D        how long a command other than watch may take (default 10s)

Run "sluicectl COMMAND -h" for the flags of a command.
`

// run runs the command line args (without the program's name).
func run(ctx context.Context, args []string, stdout output, stderr io.Writer) error {
	if len(args) == 0 {
		fmt.Fprint(stderr, usage)
		return usagef("name a command: list, watch, override, clear or dry-run")
	}
	cmd, args := args[0], args[1:]
	switch cmd {
	case "list":
		return list(ctx, args, stdout, stderr)
	case "watch":
		return watch(ctx, args, stdout, stderr)
	case "override":
		return override(ctx, args, stdout, stderr)
	case "clear":
		return clearOverride(ctx, args, stdout, stderr)
	case "dry-run":
		return dryRun(ctx, args, stdout, stderr)
	case "help", "-h", "-help", "--help":
		fmt.Fprint(stdout.w, usage)
		return nil
	}
	return usagef("unknown command %q: want list, watch, override, clear or dry-run (sluicectl help)", cmd)
}
