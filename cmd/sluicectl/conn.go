package main

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"slices"
	"strings"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	sluicev1 "github.com/sluice-go/sluice/proto/sluice/v1"
)

// connFlags are the flags every command takes to reach the server,
// named as grpcurl names them.
type connFlags struct {
	plaintext  bool
	cacert     string
	cert, key  string
	servername string
	headers    headerFlags
	timeout    time.Duration
}

func (c *connFlags) register(fs *flag.FlagSet) {
	fs.BoolVar(&c.plaintext, "plaintext", false, "connect without TLS (a Unix socket, or a test on loopback)")
	fs.StringVar(&c.cacert, "cacert", "", "`file` of PEM CAs that issued the server's certificate (default: the system's)")
	fs.StringVar(&c.cert, "cert", "", "`file` of the PEM client certificate, for a server that wants mTLS (with -key)")
	fs.StringVar(&c.key, "key", "", "`file` of the client certificate's PEM private key (with -cert)")
	fs.StringVar(&c.servername, "servername", "", "the `name` to verify the server's certificate against (default: from the address)")
	fs.Var(&c.headers, "H", "a `header` 'name: value' to send with every call (repeatable)")
	fs.DurationVar(&c.timeout, "timeout", 10*time.Second, "how long the command may take (not watch)")
}

// headerFlags are the -H flags.
type headerFlags []string

func (h *headerFlags) String() string { return strings.Join(*h, ", ") }

func (h *headerFlags) Set(v string) error {
	name, value, ok := strings.Cut(v, ":")
	if !ok || strings.TrimSpace(name) == "" {
		return fmt.Errorf("header %q: want 'name: value'", v)
	}
	*h = append(*h, strings.ToLower(strings.TrimSpace(name)), strings.TrimSpace(value))
	return nil
}

// newFlagSet returns the flag set of command cmd, with the connection
// flags, writing its help to stderr.
func newFlagSet(cmd, args string, stderr io.Writer, c *connFlags) *flag.FlagSet {
	fs := flag.NewFlagSet(cmd, flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() {
		fmt.Fprintf(stderr, "Usage: sluicectl %s [flags] %s\n\nFlags:\n", cmd, args)
		fs.PrintDefaults()
	}
	c.register(fs)
	return fs
}

// parse parses args with fs, flags before, between or after the
// arguments (so that "override ADDR NAME 5 -for 10m" reads as a person
// means it), and returns the arguments. After "--" everything is an
// argument.
func parse(fs *flag.FlagSet, args []string, want int) ([]string, error) {
	var rest []string
	if i := slices.Index(args, "--"); i >= 0 {
		args, rest = args[:i], args[i+1:]
	}
	var pos []string
	for {
		if err := fs.Parse(args); err != nil {
			if errors.Is(err, flag.ErrHelp) {
				return nil, err
			}
			return nil, usageError{err.Error()}
		}
		args = fs.Args()
		if len(args) == 0 {
			break
		}
		pos, args = append(pos, args[0]), args[1:]
	}
	pos = append(pos, rest...)
	if len(pos) != want {
		fs.Usage()
		return nil, usagef("%s takes %d argument(s), got %d: %q", fs.Name(), want, len(pos), pos)
	}
	return pos, nil
}

// A client is a connection to one server's admin service.
type client struct {
	addr string
	conn *grpc.ClientConn
	sluicev1.LimitsServiceClient
	md metadata.MD
}

// dial connects to addr as c says; the connection is made lazily, on the
// first call.
func (c *connFlags) dial(addr string) (*client, error) {
	if addr == "" {
		return nil, usagef("the address is empty: give host:port or unix:///path/to/socket")
	}
	creds, err := c.credentials()
	if err != nil {
		return nil, err
	}
	conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(creds))
	if err != nil {
		return nil, fmt.Errorf("address %q: %v: give host:port or unix:///path/to/socket", addr, err)
	}
	cl := &client{addr: addr, conn: conn, LimitsServiceClient: sluicev1.NewLimitsServiceClient(conn)}
	if len(c.headers) > 0 {
		cl.md = metadata.Pairs(c.headers...)
	}
	return cl, nil
}

func (c *connFlags) credentials() (credentials.TransportCredentials, error) {
	if c.plaintext {
		if c.cacert != "" || c.cert != "" || c.key != "" || c.servername != "" {
			return nil, usagef("-plaintext uses no TLS: leave out -cacert, -cert, -key and -servername, or drop -plaintext")
		}
		return insecure.NewCredentials(), nil
	}
	cfg := &tls.Config{MinVersion: tls.VersionTLS12, ServerName: c.servername}
	if c.cacert != "" {
		pem, err := os.ReadFile(c.cacert)
		if err != nil {
			return nil, fmt.Errorf("-cacert: %w", err)
		}
		cfg.RootCAs = x509.NewCertPool()
		if !cfg.RootCAs.AppendCertsFromPEM(pem) {
			return nil, fmt.Errorf("-cacert %s: no PEM certificate in it", c.cacert)
		}
	}
	switch {
	case c.cert != "" && c.key != "":
		pair, err := tls.LoadX509KeyPair(c.cert, c.key)
		if err != nil {
			return nil, fmt.Errorf("-cert and -key: %w", err)
		}
		cfg.Certificates = []tls.Certificate{pair}
	case c.cert != "" || c.key != "":
		return nil, usagef("a client certificate needs both -cert and -key")
	}
	return credentials.NewTLS(cfg), nil
}

// ctx returns the context of a call: with the -H headers and, unless
// watching, the -timeout.
func (c *connFlags) ctx(parent context.Context, cl *client, timed bool) (context.Context, context.CancelFunc) {
	ctx := parent
	if cl.md != nil {
		ctx = metadata.NewOutgoingContext(ctx, cl.md)
	}
	if timed && c.timeout > 0 {
		return context.WithTimeout(ctx, c.timeout)
	}
	return context.WithCancel(ctx)
}

// explain turns a status error from the server into what a person can act
// on. name is the limiter the call was about, if any.
func (cl *client) explain(err error, name string) error {
	st, ok := status.FromError(err)
	if !ok {
		return err
	}
	msg := st.Message()
	switch st.Code() {
	case codes.PermissionDenied:
		return fmt.Errorf("PERMISSION_DENIED: this client is not authorized by the server's admin.WithAuthorizer "+
			"(or WithTLSClients, WithUnixSocketPeers); the server said: %s", msg)
	case codes.Unauthenticated:
		return fmt.Errorf("UNAUTHENTICATED: the server at %s wants to know who this client is: "+
			"connect with -cert and -key (an operator certificate), or -H for a token; the server said: %s", cl.addr, msg)
	case codes.Unimplemented:
		return fmt.Errorf("UNIMPLEMENTED: the server at %s does not serve sluice's admin service (sluice.v1.LimitsService): "+
			"the server must register it with admin.Register, "+
			"perhaps on another port", cl.addr)
	case codes.NotFound:
		if name != "" {
			return fmt.Errorf("NOT_FOUND: the server has no limiter %q: \"sluicectl list %s\" shows their names "+
				"(a limiter appears on its method's first call)", name, cl.addr)
		}
	case codes.Unavailable:
		hint := "is the server up at that address?"
		if strings.Contains(msg, "tls:") || strings.Contains(msg, "handshake") {
			hint = "TLS failed: for a server without TLS use -plaintext; for one with TLS check -cacert and -servername"
		}
		return fmt.Errorf("UNAVAILABLE: cannot reach the admin service at %s: %s; %s", cl.addr, msg, hint)
	case codes.DeadlineExceeded:
		return fmt.Errorf("DEADLINE_EXCEEDED: no answer from %s in time (-timeout); the server said: %s", cl.addr, msg)
	case codes.Canceled:
		return context.Canceled
	}
	return fmt.Errorf("%s: %s", codeName(st.Code()), msg)
}

// codeName spells a code as gRPC's documentation does: PERMISSION_DENIED.
func codeName(c codes.Code) string {
	var b strings.Builder
	for i, r := range c.String() {
		if i > 0 && r >= 'A' && r <= 'Z' {
			b.WriteByte('_')
		}
		b.WriteRune(r)
	}
	return strings.ToUpper(b.String())
}

// limiterName returns the name of a limiter as the server lists it,
// without the leading slash of a gRPC method's full name.
func limiterName(s string) (string, error) {
	name := strings.TrimPrefix(strings.TrimSpace(s), "/")
	if name == "" {
		return "", usagef("the limiter name is empty: give it as list shows it, such as pkg.Svc/Method")
	}
	return name, nil
}
