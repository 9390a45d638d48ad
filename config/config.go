package config

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"math"
	"net/netip"
	"os"
	"slices"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/sluice-go/sluice/internal/fielderr"

	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/sluice-go/sluice/callerkey"
	"github.com/sluice-go/sluice/interceptor"
	"github.com/sluice-go/sluice/internal/fileopt"
	"github.com/sluice-go/sluice/internal/grpcname"
	"github.com/sluice-go/sluice/limiter"
	sluicev1 "github.com/sluice-go/sluice/proto/sluice/v1"
)

// Load reads a configuration file, the protobuf JSON form of
// sluicev1.Config, and returns the server options it describes. A file
// can set the default Limit and the Limit of named methods and services
// (an algorithm, a queue, a rate limit, a priority, exempt, dry run), a
// per-caller quota, the priority header and a global dry run; everything
// else is set in code. testdata/config/example.json sets every field.
// Durations take protobuf's JSON form, seconds with an "s" suffix:
// "0.050s", not "50ms". Unknown fields are rejected, and so is every
// out-of-range value, by the same checks interceptor.NewServer applies to
// options (see Options): the error is an *Error naming the file and
// listing its problems.
//
//	opts, err := config.Load("sluice.json")
//	...
//	limits, err := interceptor.NewServer(opts...)
//
// Options given after the loaded ones add to them; a method configured
// both in the file and by an interceptor.WithMethod option is an error of
// NewServer. Server.Reload and Watch, by contrast, layer the file over the
// options the Server was built with, so that settings made in code and
// not in the file (a per-caller quota, the priorities) stay. Options that
// came from a file are not part of that base: the reloaded file replaces
// them whole, so an entry deleted from the file is gone after a reload.
//
// The path must name a regular file (or a symbolic link to one) of at
// most 1 MiB, hundreds of times the size of a real configuration: a larger
// file is refused without being read whole, and a FIFO, a device or a
// directory without being opened, so that a wrong path can neither
// exhaust memory nor block the caller.
func Load(path string) ([]interceptor.ServerOption, error) {
	data, err := readFile(path)
	if err != nil {
		return nil, err
	}
	return cfgParse(data, path)
}

// maxSize is the largest config file Load and Watch
// read, in bytes. A real configuration is a few kilobytes; the cap keeps a
// wrong path (a log file, a device) or a hostile file from exhausting
// memory.
const maxSize = 1 << 20

// readFile reads the file at path, refusing one that is not a
// regular file or is larger than maxSize.
func readFile(path string) ([]byte, error) {
	// Opening a FIFO blocks until a writer comes, so the type is checked
	// before the open, and again on the file opened, in case path changed.
	fi, err := os.Stat(path)
	if err != nil {
		return nil, fmt.Errorf("config: reading: %w", err)
	}
	if err := checkMode(path, fi.Mode()); err != nil {
		return nil, err
	}
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("config: reading: %w", err)
	}
	defer f.Close()
	if fi, err := f.Stat(); err != nil {
		return nil, fmt.Errorf("config: reading: %w", err)
	} else if err := checkMode(path, fi.Mode()); err != nil {
		return nil, err
	}
	data, err := io.ReadAll(io.LimitReader(f, maxSize+1))
	if err != nil {
		return nil, fmt.Errorf("config: reading: %w", err)
	}
	if len(data) > maxSize {
		size := fmt.Sprintf("at least %d", len(data))
		if fi, err := f.Stat(); err == nil && fi.Mode().IsRegular() && fi.Size() > maxSize {
			size = fmt.Sprint(fi.Size())
		}
		return nil, fmt.Errorf("config: %s is %s bytes, more than the limit of %d bytes", path, size, maxSize)
	}
	return data, nil
}

// checkMode refuses a config path that is not a regular file.
func checkMode(path string, m fs.FileMode) error {
	if m.IsRegular() {
		return nil
	}
	what := "not a regular file"
	switch {
	case m.IsDir():
		what = "a directory"
	case m&fs.ModeNamedPipe != 0:
		what = "a named pipe (FIFO)"
	case m&fs.ModeSocket != 0:
		what = "a socket"
	case m&fs.ModeDevice != 0:
		what = "a device"
	}
	return fmt.Errorf("config: %s is %s: name a regular file", path, what)
}

// Parse is Load for a configuration already in memory, the
// protobuf JSON form of sluicev1.Config (see
// testdata/config/example.json).
func Parse(data []byte) ([]interceptor.ServerOption, error) {
	return cfgParse(data, "")
}

func cfgParse(data []byte, file string) ([]interceptor.ServerOption, error) {
	var pb sluicev1.Config
	if err := (protojson.UnmarshalOptions{DiscardUnknown: false}).Unmarshal(data, &pb); err != nil {
		where := "parsing"
		if file != "" {
			where += " " + file
		}
		// The message quotes the offending token, which may be the file.
		return nil, &cutError{msg: "config: " + where + ": " + cfgCut(err.Error()) + durationHint(err.Error()), err: err}
	}
	opts, err := Options(&pb)
	if ce := (*Error)(nil); errors.As(err, &ce) {
		ce.File = file
	}
	return opts, err
}

// durationHint says how to write the duration protojson's message msg
// refuses, if it refuses one: protojson reads only seconds with an "s"
// suffix, where a Go programmer writes "50ms".
func durationHint(msg string) string {
	const bad = "invalid google.protobuf.Duration value "
	i := strings.LastIndex(msg, bad)
	if i < 0 {
		return ""
	}
	const form = `: write a duration as seconds with an "s" suffix, such as "0.050s" or "60s"`
	v, err := strconv.Unquote(msg[i+len(bad):])
	if err != nil {
		return form
	}
	d, err := time.ParseDuration(v)
	if err != nil {
		return form
	}
	hint := fmt.Sprintf(`: write a duration as seconds with an "s" suffix: %q`, strconv.FormatFloat(d.Seconds(), 'f', -1, 64)+"s")
	if len(v) <= 32 { // the message quotes it already, cut
		hint += " for " + v
	}
	return hint
}

// cutError is err with a message of bounded length.
type cutError struct {
	msg string
	err error
}

func (e *cutError) Error() string { return e.msg }
func (e *cutError) Unwrap() error { return e.err }

// Options validates c and returns the options it describes: an
// interceptor.WithDefault option if c sets a default, then one WithMethod
// option per name of each entry, in order, then the caller limit, the
// priority header and the dry run if c sets them. A nil c describes no options.
// The error, if any, is a *Error listing the problems, each named
// by its path in c ("methods[2].limit.aimd.backoff_ratio"): all of them,
// or past 20 the first 20 and the number of the others. Validation takes
// time linear in the size of c.
//
// The values of each algorithm and queue are checked by package limiter,
// exactly as interceptor.NewServer checks a Limit built in code; a value left 0 takes
// the limiter's default. See testdata/config/example.json for a file that
// sets every field, and docs/design.md for the reasoning behind the
// ranges and the layering of a file over options.
func Options(c *sluicev1.Config) ([]interceptor.ServerOption, error) {
	st, err := read(c)
	if err != nil {
		return nil, err
	}
	return st.options(), nil
}

// settings is what a valid configuration sets.
type settings struct {
	def     *interceptor.Limit
	methods []method
	quota   *quota
	header  string         // the priority header
	fairKey callerkey.Func // fair_share's; nil for none
	dryRun  bool
}

// A method is a name of a methods entry and the entry's Limit.
type method struct {
	name  string
	limit interceptor.Limit
}

// A quota is the caller_limit: per caller, perSecond and burst, for at
// most maxCallers callers (0: the interceptor's default).
type quota struct {
	key               callerkey.Func
	perSecond         float64
	burst, maxCallers int
}

// options returns the interceptor options of st, each marked as a file's.
func (st settings) options() []interceptor.ServerOption {
	var opts []any
	if st.def != nil {
		opts = append(opts, interceptor.WithDefault(*st.def))
	}
	for _, m := range st.methods {
		opts = append(opts, interceptor.WithMethod(m.name, m.limit))
	}
	if q := st.quota; q != nil {
		opts = append(opts, fileopt.CallerQuota(q.key, q.perSecond, q.burst, q.maxCallers))
	}
	if st.header != "" {
		opts = append(opts, fileopt.PriorityHeader(st.header))
	}
	if st.fairKey != nil {
		opts = append(opts, interceptor.WithFairShare(st.fairKey))
	}
	if st.dryRun {
		opts = append(opts, interceptor.WithDryRun())
	}
	out := make([]interceptor.ServerOption, len(opts))
	for i, o := range opts {
		out[i] = fileopt.FromFile(o).(interceptor.ServerOption)
	}
	return out
}

// read checks c and returns what it sets; see Options.
func read(c *sluicev1.Config) (settings, error) {
	var ps cfgProblems
	var st settings
	if c.GetDefault() != nil {
		def := cfgLimit(&ps, "default", c.GetDefault())
		st.def = &def
	}
	type where struct{ entry, name int }
	seen := map[string]where{} // full name -> where it was first configured
	for i, m := range c.GetMethods() {
		path := fmt.Sprintf("methods[%d]", i)
		if len(m.GetName()) == 0 {
			ps.add(path+".name", "is empty: name at least one service, or a service and a method")
		}
		var names []string
		for j, n := range m.GetName() {
			np := fmt.Sprintf("%s.name[%d]", path, j)
			if fault := grpcname.Check(n.GetService(), n.GetMethod()); fault.Kind != grpcname.OK {
				ps.add(np, "%s", fault.FileMessage())
				continue
			}
			if fault := grpcname.LinkedFault(n.GetService(), n.GetMethod()); fault != "" {
				ps.add(np, "cannot be served: %s", fault)
				continue
			}
			full := "/" + n.GetService() + "/" + n.GetMethod()
			prev, dup := seen[full]
			switch {
			case !dup:
				seen[full] = where{i, j}
				names = append(names, full)
			case prev.entry == i:
				ps.add(np, "%q is already configured by %s.name[%d]", full, path, prev.name)
			default:
				ps.add(np, "%q is already configured by methods[%d]", full, prev.entry)
			}
		}
		l := cfgLimit(&ps, path+".limit", m.GetLimit())
		for _, name := range names {
			st.methods = append(st.methods, method{name, l})
		}
	}
	if cl := c.GetCallerLimit(); cl != nil {
		n := ps.n
		cfgCheckCallerLimit(&ps, "caller_limit", cl)
		if ps.n == n {
			r := cl.GetRateLimit()
			st.quota = &quota{callerLimitKey(cl).fn(), r.GetPerSecond(), int(r.GetBurst()), int(cl.GetMaxCallers())}
		}
	}
	if h := c.GetPriorityHeader(); h != "" {
		cfgCheckHeader(&ps, "priority_header", h)
		st.header = h
	}
	if f := c.GetFairShare(); f != nil {
		n := ps.n
		cfgCheckKey(&ps, "fair_share", fairShareKey(f))
		if ps.n == n {
			st.fairKey = fairShareKey(f).fn()
		}
	}
	st.dryRun = c.GetDryRun()
	return st, ps.err()
}

// A cfgKey is how a caller_limit or a fair_share names callers: one of
// its three fields, or none.
type cfgKey struct {
	ip  *sluicev1.IpKey
	pid *sluicev1.PeerIdentityKey
	md  *sluicev1.MetadataKey
}

func callerLimitKey(cl *sluicev1.CallerLimit) cfgKey {
	return cfgKey{cl.GetIp(), cl.GetPeerIdentity(), cl.GetMetadata()}
}

func fairShareKey(f *sluicev1.FairShare) cfgKey {
	return cfgKey{f.GetIp(), f.GetPeerIdentity(), f.GetMetadata()}
}

// fn returns the callerkey.Func of a valid key.
func (k cfgKey) fn() callerkey.Func {
	switch {
	case k.ip != nil:
		ip := callerkey.IP{
			IPv4Prefix: int(k.ip.GetIpv4Prefix()),
			IPv6Prefix: int(k.ip.GetIpv6Prefix()),
			Header:     k.ip.GetHeader(),
		}
		for _, p := range k.ip.GetTrustedProxies() {
			ip.TrustedProxies = append(ip.TrustedProxies, netip.MustParsePrefix(p)) // checked
		}
		if f, err := ip.Func(); err == nil {
			return f
		}
	case k.pid != nil:
		return callerkey.PeerIdentity
	case k.md != nil:
		return callerkey.Metadata(k.md.GetHeader())
	}
	return nil // checked by cfgCheckKey
}

// An Error reports the problems of a configuration at once: all of
// them, or if there are more than 20, the first 20 and how many others.
// One bad edit is fixed from its first errors, and a configuration of
// thousands of bad entries gets an error of bounded size.
type Error struct {
	// File is the configuration file, if the configuration came from one.
	File string
	// Problems lists the problems in the order of the configuration, at
	// most 20 of them.
	Problems []Problem
	// More counts the problems found after those in Problems.
	More int
}

// maxProblems is how many problems a Error lists.
const maxProblems = 20

// maxProblemMessage is the longest Problem.Message, in bytes: a
// message may quote a value of the configuration, of any length.
const maxProblemMessage = 256

// A Problem is one invalid field of a configuration.
type Problem struct {
	// Path is the field, with the names of config.proto:
	// "methods[2].limit.aimd.backoff_ratio".
	Path string
	// Message says what is wrong and what is allowed: "1.2 is not in
	// [0.5, 1)". A message longer than 256 bytes is cut and ends in
	// "...".
	Message string
}

// line is p as Error lists it.
func (p Problem) line() string { return p.Path + ": " + p.Message }

// Error names the file, if any, and the problem, or the number of
// problems and then each listed on a line of its own, and the number of
// those not listed:
//
//	config: invalid configuration sluice.json: methods[0].name[0]: service is empty
//
//	config: invalid configuration: 2 problems:
//		default.fixed.limit: 0 is not in [1, 1048576]
//		methods[1].limit.queue.size: -1 is not in [0, 1048576]
//
//	config: invalid configuration: 5000 problems, the first 20:
//		methods[0].name: is empty: name at least one service, or a service and a method
//		...
//		methods[19].name: is empty: name at least one service, or a service and a method
//		... and 4980 more
func (e *Error) Error() string {
	var b strings.Builder
	b.WriteString("config: invalid configuration")
	if e.File != "" {
		b.WriteString(" " + e.File)
	}
	if len(e.Problems) == 1 && e.More == 0 {
		b.WriteString(": " + e.Problems[0].line())
		return b.String()
	}
	fmt.Fprintf(&b, ": %d problems", len(e.Problems)+e.More)
	if e.More > 0 {
		fmt.Fprintf(&b, ", the first %d", len(e.Problems))
	}
	b.WriteString(":")
	for _, p := range e.Problems {
		b.WriteString("\n\t" + p.line())
	}
	if e.More > 0 {
		fmt.Fprintf(&b, "\n\t... and %d more", e.More)
	}
	return b.String()
}

// cfgProblems collects ConfigProblems: the first maxProblems, and
// the count of all.
type cfgProblems struct {
	list  []Problem
	paths map[string]bool // the path of every problem, kept or not
	n     int             // problems found, kept or not
}

// add records a problem of path, unless path has one already.
func (ps *cfgProblems) add(path, format string, args ...any) {
	if ps.paths[path] {
		return
	}
	if ps.paths == nil {
		ps.paths = map[string]bool{}
	}
	ps.paths[path] = true
	ps.n++
	if len(ps.list) < maxProblems {
		ps.list = append(ps.list, Problem{Path: path, Message: cfgCut(fmt.Sprintf(format, args...))})
	}
}

// cfgCut cuts s to maxProblemMessage bytes, at a character boundary.
func cfgCut(s string) string {
	if len(s) <= maxProblemMessage {
		return s
	}
	const more = "..."
	i := maxProblemMessage - len(more)
	for i > 0 && !utf8.RuneStart(s[i]) {
		i--
	}
	return s[:i] + more
}

func (ps *cfgProblems) err() error {
	if ps.n == 0 {
		return nil
	}
	return &Error{Problems: ps.list, More: ps.n - len(ps.list)}
}

// cfgLimit converts l to an interceptor.Limit and adds its problems to ps; nil is the
// zero interceptor.Limit. The file's own rules (what an exempt limit may set, the
// enum, durations, the rate limit) are checked here; the values of the
// algorithm and the queue by package limiter, through cfgLimiterCheck.
func cfgLimit(ps *cfgProblems, path string, l *sluicev1.Limit) interceptor.Limit {
	if l == nil {
		return interceptor.Limit{}
	}
	if l.GetExempt() {
		var set []string
		if name, _ := cfgAlgorithm(l); name != "" {
			set = append(set, name)
		}
		if l.GetQueue() != nil {
			set = append(set, "queue")
		}
		if l.GetRateLimit() != nil {
			set = append(set, "rate_limit")
		}
		if l.GetPriority() != sluicev1.Priority_PRIORITY_UNSPECIFIED {
			set = append(set, "priority")
		}
		if l.GetDryRun() {
			set = append(set, "dry_run")
		}
		if len(set) > 0 {
			ps.add(path+".exempt", "true conflicts with %s: an exempt method has no limiter", strings.Join(set, ", "))
		}
		return interceptor.Limit{Exempt: true}
	}
	out := interceptor.Limit{
		Rate:   interceptor.RateLimit{PerSecond: l.GetRateLimit().GetPerSecond(), Burst: int(l.GetRateLimit().GetBurst())},
		DryRun: l.GetDryRun(),
	}
	switch alg := l.GetAlgorithm().(type) {
	case *sluicev1.Limit_Aimd:
		a := alg.Aimd
		timeout, _ := cfgCheckDuration(ps, path+".aimd.timeout", a.GetTimeout())
		out.Algorithm = limiter.AIMDConfig{
			InitialLimit: int(a.GetInitialLimit()),
			MinLimit:     int(a.GetMinLimit()),
			MaxLimit:     int(a.GetMaxLimit()),
			BackoffRatio: a.GetBackoffRatio(),
			Timeout:      timeout,
			PerCall:      a.GetPerCall(),
		}
	case *sluicev1.Limit_Vegas:
		v := alg.Vegas
		out.Algorithm = limiter.VegasConfig{
			InitialLimit:    int(v.GetInitialLimit()),
			MinLimit:        int(v.GetMinLimit()),
			MaxLimit:        int(v.GetMaxLimit()),
			Alpha:           v.GetAlpha(),
			Beta:            v.GetBeta(),
			Smoothing:       v.GetSmoothing(),
			ProbeMultiplier: int(v.GetProbeMultiplier()),
		}
	case *sluicev1.Limit_Gradient2:
		g := alg.Gradient2
		out.Algorithm = limiter.Gradient2Config{
			InitialLimit: int(g.GetInitialLimit()),
			MinLimit:     int(g.GetMinLimit()),
			MaxLimit:     int(g.GetMaxLimit()),
			QueueSize:    int(g.GetQueueSize()),
			Smoothing:    g.GetSmoothing(),
			LongWindow:   int(g.GetLongWindow()),
		}
	case *sluicev1.Limit_Fixed:
		out.Algorithm = limiter.FixedConfig{Limit: int(alg.Fixed.GetLimit())}
	}
	switch b := l.GetQueue().GetBound().(type) {
	case *sluicev1.Queue_Size:
		out.Queue = limiter.Queue{Size: int(b.Size)}
	case *sluicev1.Queue_Target:
		// The limiter reads a zero target as no queue; the file says so
		// by leaving the bound unset.
		if d, ok := cfgCheckDuration(ps, path+".queue.target", b.Target); ok && d == 0 {
			ps.add(path+".queue.target", "%v is not > 0", d)
		} else {
			out.Queue = limiter.Queue{Target: d}
		}
	}
	out.Queue.LIFO = l.GetQueue().GetLifo()
	cfgLimiterCheck(ps, path, l, out)
	if r := l.GetRateLimit(); r.GetPerSecond() != 0 || r.GetBurst() != 0 {
		if v := r.GetPerSecond(); !(v > 0) || math.IsInf(v, 1) {
			ps.add(path+".rate_limit.per_second", "%v is not a finite number > 0", v)
		}
		if b := r.GetBurst(); b < 0 {
			ps.add(path+".rate_limit.burst", "%d is not >= 0", b)
		}
	}
	if p := l.GetPriority(); sluicev1.Priority_name[int32(p)] == "" {
		ps.add(path+".priority", "%d is not PRIORITY_CRITICAL, PRIORITY_DEFAULT or PRIORITY_SHEDDABLE", int32(p))
	} else {
		out.Priority = cfgPriority[p]
	}
	return out
}

var cfgPriority = map[sluicev1.Priority]interceptor.Priority{
	sluicev1.Priority_PRIORITY_UNSPECIFIED: interceptor.PriorityDefault,
	sluicev1.Priority_PRIORITY_DEFAULT:     interceptor.PriorityDefault,
	sluicev1.Priority_PRIORITY_CRITICAL:    interceptor.PriorityCritical,
	sluicev1.Priority_PRIORITY_SHEDDABLE:   interceptor.PrioritySheddable,
}

// cfgAlgorithm is the file's name of l's algorithm ("aimd") and its
// message; "" and nil if l sets none.
func cfgAlgorithm(l *sluicev1.Limit) (string, protoreflect.Message) {
	m := l.ProtoReflect()
	fd := m.WhichOneof(m.Descriptor().Oneofs().ByName("algorithm"))
	if fd == nil {
		return "", nil
	}
	return string(fd.Name()), m.Get(fd).Message()
}

// cfgLimiterFields names the file's field, relative to the limit, of each
// field of a limiter's error (fielderr.Error) that is not
// "<Kind>Config.<Field>" of the limit's algorithm (which the rule in cfgLimiterCheck maps).
var cfgLimiterFields = map[string]string{
	"FixedConfig.Limit": "fixed.limit", // no default to show
	"Queue.Size":        "queue.size",
	"Queue.Target":      "queue.target",
}

// cfgAllowed overrides what a fielderr.Error allows where the file reads
// otherwise: a zero AIMD timeout is "unset" in the file.
var cfgAllowed = map[string]string{
	"AIMDConfig.Timeout": ">= 0",
}

// cfgLimiterCheck has package limiter check the algorithm and the queue
// of out, converted from l, and adds each *fielderr.Error to ps under
// its path in the file. A field l leaves unset is shown as the limiter's
// default ("default 20"), and a problem that only follows from another
// (an initial limit outside a min_limit already reported) is left out.
func cfgLimiterCheck(ps *cfgProblems, path string, l *sluicev1.Limit, out interceptor.Limit) {
	var errs []error
	if out.Algorithm != nil {
		if _, err := out.Algorithm.New(); err != nil {
			errs = append(errs, err)
		}
	}
	if _, err := limiter.New(limiter.WithQueue(out.Queue)); err != nil {
		errs = append(errs, err)
	}
	algName, alg := cfgAlgorithm(l)
	type problem struct {
		field   string // the limiter's field name: "MinLimit"
		path    string
		message string
		refs    []string // the limiter's field names the message mentions
	}
	var found []problem
	bad := map[string]bool{}
	for _, leaf := range cfgLeaves(errors.Join(errs...)) {
		var ce *fielderr.Error
		if !errors.As(leaf, &ce) {
			// A check without a field: report it whole.
			found = append(found, problem{path: path, message: leaf.Error()})
			continue
		}
		value, allowed := fmt.Sprint(ce.Value), ce.Allowed
		if a, ok := cfgAllowed[ce.Field]; ok {
			allowed = a
		}
		p := problem{field: ce.Field}
		if rel, ok := cfgLimiterFields[ce.Field]; ok {
			p.path = path + "." + rel
		} else if kind, field, ok := strings.Cut(ce.Field, "."); ok && alg != nil && strings.HasSuffix(kind, "Config") {
			p.field = field
			p.path = path + "." + algName + "." + cfgSnake(field)
			fields := alg.Descriptor().Fields()
			if fd := fields.ByName(protoreflect.Name(cfgSnake(field))); fd != nil && !alg.Has(fd) {
				value = "default " + value
			}
			for i := range fields.Len() {
				fd := fields.Get(i)
				goName := cfgCamel(string(fd.Name()))
				if !strings.Contains(allowed, goName) {
					continue
				}
				p.refs = append(p.refs, goName)
				if !alg.Has(fd) {
					allowed = strings.ReplaceAll(allowed, goName+" (", goName+" (default ")
				}
				allowed = strings.ReplaceAll(allowed, goName, string(fd.Name()))
			}
		} else {
			p.path = path // a field of no file path: keep the limiter's name
			value = ce.Field + " " + value
		}
		p.message = value + " is not " + allowed
		found = append(found, p)
		bad[p.field] = true
	}
	for _, p := range found {
		if !slices.ContainsFunc(p.refs, func(r string) bool { return r != p.field && bad[r] }) {
			ps.add(p.path, "%s", p.message)
		}
	}
}

// cfgLeaves lists the leaves of err, a tree of joined errors, in order.
func cfgLeaves(err error) []error {
	if err == nil {
		return nil
	}
	j, ok := err.(interface{ Unwrap() []error })
	if !ok {
		return []error{err}
	}
	var all []error
	for _, e := range j.Unwrap() {
		all = append(all, cfgLeaves(e)...)
	}
	return all
}

// cfgSnake turns a limiter field name into the file's: "MinLimit" ->
// "min_limit".
func cfgSnake(s string) string {
	var b strings.Builder
	for i, r := range s {
		if r >= 'A' && r <= 'Z' {
			if i > 0 {
				b.WriteByte('_')
			}
			r += 'a' - 'A'
		}
		b.WriteRune(r)
	}
	return b.String()
}

// cfgCamel is the inverse of cfgSnake: "min_limit" -> "MinLimit".
func cfgCamel(s string) string {
	var b strings.Builder
	for part := range strings.SplitSeq(s, "_") {
		if part != "" {
			b.WriteString(strings.ToUpper(part[:1]) + part[1:])
		}
	}
	return b.String()
}

// callerRateMin and callerRateMax are the rates ratelimit.NewKeyed takes:
// an interval between calls of 1 ns to about 32 years.
const callerRateMin, callerRateMax = 1e-9, 1e9

func cfgCheckCallerLimit(ps *cfgProblems, path string, cl *sluicev1.CallerLimit) {
	r := cl.GetRateLimit()
	rate, burst := r.GetPerSecond(), r.GetBurst()
	rateOK := rate >= callerRateMin && rate <= callerRateMax
	if !rateOK {
		ps.add(path+".rate_limit.per_second", "%v is not in [%g, %g]: each caller's quota is required", rate, callerRateMin, callerRateMax)
	}
	switch {
	case burst < 0:
		ps.add(path+".rate_limit.burst", "%d is not >= 0", burst)
	case rateOK:
		b := int(burst)
		if b == 0 { // one second's worth, as interceptor.RateLimit reads it
			b = max(1, int(math.Min(rate, limiter.MaxLimit)))
		}
		if interval := math.Round(1e9 / rate); interval*float64(b) > 1<<61 {
			ps.add(path+".rate_limit.burst", "%d at %v a second takes more than 73 years to refill", b, rate)
		}
	}
	cfgCheckKey(ps, path, callerLimitKey(cl))
	if n := cl.GetMaxCallers(); n < 0 {
		ps.add(path+".max_callers", "%d is not in [1, %d] (0 for 100000)", n, math.MaxInt32)
	}
}

// cfgCheckKey checks the key of a caller_limit or a fair_share at path.
func cfgCheckKey(ps *cfgProblems, path string, k cfgKey) {
	switch {
	case k.ip == nil && k.pid == nil && k.md == nil:
		ps.add(path, "sets no key: set ip, peer_identity or metadata")
	case k.ip != nil:
		p := path + ".ip"
		if n := k.ip.GetIpv4Prefix(); n < 0 || n > 32 {
			ps.add(p+".ipv4_prefix", "%d is not in [1, 32] (0 for 32)", n)
		}
		if n := k.ip.GetIpv6Prefix(); n < 0 || n > 128 {
			ps.add(p+".ipv6_prefix", "%d is not in [1, 128] (0 for 64)", n)
		}
		for i, s := range k.ip.GetTrustedProxies() {
			if _, err := netip.ParsePrefix(s); err != nil {
				ps.add(fmt.Sprintf("%s.trusted_proxies[%d]", p, i), "%q is not a network in CIDR form, such as \"10.0.0.0/8\" or \"2001:db8::/32\"", s)
			}
		}
		if h := k.ip.GetHeader(); h != "" {
			if len(k.ip.GetTrustedProxies()) == 0 {
				ps.add(p+".header", "%q is set but trusted_proxies is empty: a header is only believed from a trusted proxy", h)
			} else {
				cfgCheckHeader(ps, p+".header", h)
			}
		}
	case k.md != nil:
		if h := k.md.GetHeader(); h == "" {
			ps.add(path+".metadata.header", "is empty: name the header, such as \"x-api-key\"")
		} else {
			cfgCheckHeader(ps, path+".metadata.header", h)
		}
	}
}

// cfgCheckHeader checks a metadata key: gRPC allows lowercase letters,
// digits, '-', '_' and '.' (uppercase is folded), and reserves "grpc-"; a
// "-bin" key holds bytes, not text.
func cfgCheckHeader(ps *cfgProblems, path, h string) {
	k := strings.ToLower(h)
	switch {
	case strings.ContainsFunc(k, func(r rune) bool {
		return !(r >= 'a' && r <= 'z' || r >= '0' && r <= '9' || r == '-' || r == '_' || r == '.')
	}):
		ps.add(path, "%q is not a metadata key: use letters, digits, '-', '_' and '.'", h)
	case strings.HasPrefix(k, "grpc-"):
		ps.add(path, "%q is reserved by gRPC (prefix \"grpc-\")", h)
	case strings.HasSuffix(k, "-bin"):
		ps.add(path, "%q is a binary header (suffix \"-bin\"); name a text one", h)
	}
}

// cfgCheckDuration checks that d, at path, is a valid duration within the
// range of a time.Duration and returns it. A nil d is 0.
func cfgCheckDuration(ps *cfgProblems, path string, d *durationpb.Duration) (time.Duration, bool) {
	if d == nil {
		return 0, true
	}
	if err := d.CheckValid(); err != nil {
		ps.add(path, "%v", err)
		return 0, false
	}
	const maxSeconds = math.MaxInt64 / int64(time.Second)
	if d.GetSeconds() > maxSeconds || d.GetSeconds() < -maxSeconds {
		ps.add(path, "%ds is out of range: at most %v", d.GetSeconds(), time.Duration(maxSeconds)*time.Second)
		return 0, false
	}
	return d.AsDuration(), true
}
