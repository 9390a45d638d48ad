package interceptor

import (
	"errors"
	"fmt"
	"io"
	"math"
	"net/netip"
	"os"
	"slices"
	"strconv"
	"strings"
	"time"

	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/sluice-go/sluice/limiter"
	sluicev1 "github.com/sluice-go/sluice/proto/sluice/v1"
	"github.com/sluice-go/sluice/ratelimit"
)

// LoadConfig reads a configuration file, the protobuf JSON form of
// sluicev1.Config, and returns the options it describes. Unknown fields
// are rejected, and so is every out-of-range value: the error is a
// *ConfigError naming the file and listing every problem.
//
//	opts, err := interceptor.LoadConfig("sluice.json")
//	...
//	srvOpts, err := interceptor.ServerOptions(opts...)
//
// Options given after the loaded ones add to them; a method configured
// both in the file and by a WithMethod option is an error of NewServer.
// Reload and WatchConfig, by contrast, layer the file over the options the
// Server or Client was built with, so that settings made in code and not
// in the file (a per-caller quota, the priority header) stay. Options that
// came from a file are not part of that base: the reloaded file replaces
// them whole, so an entry deleted from the file is gone after a reload.
//
// A file larger than MaxConfigSize is refused without being read whole.
func LoadConfig(path string) ([]Option, error) {
	data, err := readConfigFile(path)
	if err != nil {
		return nil, err
	}
	return cfgParse(data, path)
}

// MaxConfigSize is the largest config file LoadConfig and WatchConfig
// read, in bytes. A real configuration is a few kilobytes; the cap keeps a
// wrong path (a log file, a device) or a hostile file from exhausting
// memory.
const MaxConfigSize = 1 << 20

// readConfigFile reads the file at path, refusing one larger than
// MaxConfigSize.
func readConfigFile(path string) ([]byte, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("interceptor: reading config: %w", err)
	}
	defer f.Close()
	data, err := io.ReadAll(io.LimitReader(f, MaxConfigSize+1))
	if err != nil {
		return nil, fmt.Errorf("interceptor: reading config: %w", err)
	}
	if len(data) > MaxConfigSize {
		size := fmt.Sprintf("at least %d", len(data))
		if fi, err := f.Stat(); err == nil && fi.Mode().IsRegular() && fi.Size() > MaxConfigSize {
			size = fmt.Sprint(fi.Size())
		}
		return nil, fmt.Errorf("interceptor: config %s is %s bytes, more than MaxConfigSize (%d bytes)", path, size, MaxConfigSize)
	}
	return data, nil
}

// ParseConfig is LoadConfig for a configuration already in memory.
func ParseConfig(data []byte) ([]Option, error) {
	return cfgParse(data, "")
}

func cfgParse(data []byte, file string) ([]Option, error) {
	var pb sluicev1.Config
	if err := (protojson.UnmarshalOptions{DiscardUnknown: false}).Unmarshal(data, &pb); err != nil {
		where := "config"
		if file != "" {
			where += " " + file
		}
		return nil, fmt.Errorf("interceptor: %s: %w", where, err)
	}
	opts, err := ConfigOptions(&pb)
	if ce := (*ConfigError)(nil); errors.As(err, &ce) {
		ce.File = file
	}
	return opts, err
}

// ConfigOptions validates c and returns the options it describes: a
// WithDefault option if c sets a default, then one WithMethod option per
// name of each entry, in order. A nil c describes no options. The error,
// if any, is a *ConfigError listing every problem.
func ConfigOptions(c *sluicev1.Config) ([]Option, error) {
	fc, err := FromConfig(c)
	if err != nil {
		return nil, err
	}
	opts := fc.options()
	for i, o := range opts {
		opts[i] = fileOption(o)
	}
	return opts, nil
}

// A FileConfig is a configuration file in Go form, for programs that
// build or inspect one: FromConfig and ToConfig convert it from and to
// sluicev1.Config, and its Options method turns it into options.
type FileConfig struct {
	// Default is the Limit of every method no entry of Methods matches;
	// nil leaves the default alone (see WithDefault).
	Default *LimitConfig
	// Methods configure methods and services (see WithMethod).
	Methods []MethodConfig
	// CallerLimit, if not nil, is a per-caller quota (see
	// WithCallerRateLimit); nil leaves it as built.
	CallerLimit *CallerLimitConfig
	// PriorityHeader, if not empty, is the metadata key a call may name
	// its priority in (see WithPriorityHeader); empty leaves it as built.
	PriorityHeader string
	// DryRun puts every limit in a dry run (see WithDryRun).
	DryRun bool
}

// A CallerLimitConfig is a per-caller quota described by configuration
// rather than code. Exactly one of IP, PeerIdentity and Metadata names
// the callers.
type CallerLimitConfig struct {
	// Rate is each caller's quota; PerSecond is required.
	Rate RateLimit
	// IP names callers by address (see IPKey).
	IP *IPKey
	// PeerIdentity names callers by their verified client certificate
	// (see PeerIdentity).
	PeerIdentity bool
	// Metadata, if not empty, names callers by the first value of this
	// header (see MetadataKey): only for a header the server checks.
	Metadata string
	// MaxCallers, if not 0, bounds the callers tracked (see
	// WithMaxCallers).
	MaxCallers int
}

// A MethodConfig applies one limit to the methods and services it names.
type MethodConfig struct {
	// Names are "/package.Service/Method" or "/package.Service/", as for
	// WithMethod. Each name gets a limiter of its own built from Limit.
	Names []string
	// Limit is the names' limit.
	Limit LimitConfig
}

// A LimitConfig is a Limit described by configuration rather than code.
// The zero LimitConfig is the zero Limit: AIMD with its defaults, no
// queue.
type LimitConfig struct {
	// At most one algorithm may be set; none means AIMD with its defaults.
	AIMD      *limiter.AIMDConfig
	Vegas     *limiter.VegasConfig
	Gradient2 *limiter.Gradient2Config
	// Fixed, if not 0, is a fixed limit (see Fixed).
	Fixed int
	// Queue lets calls wait for a permit (see Limit.Queue).
	Queue QueueConfig
	// Rate is the limit's rate limit (see Limit.Rate).
	Rate RateLimit
	// Priority ranks the limit's calls (see Limit.Priority).
	Priority Priority
	// Exempt lets calls through without a limiter; no other field may be
	// set with it.
	Exempt bool
	// DryRun records the limit's decisions without enforcing them (see
	// Limit.DryRun).
	DryRun bool
}

// A QueueConfig describes a limiter.Queue. Set at most one of Size and
// Target; with neither, calls do not wait (limiter.NoQueue).
type QueueConfig struct {
	// Size, if not 0, is the bound of a limiter.FixedQueue.
	Size int
	// Target, if not 0, is the target of a limiter.LittleQueue.
	Target time.Duration
	// LIFO serves waiting calls newest first (see Limit.LIFO).
	LIFO bool
}

// Options validates c and returns the options it describes, as
// ConfigOptions does for its protobuf form.
func (c FileConfig) Options() ([]Option, error) {
	pb, err := ToConfig(c)
	if err != nil {
		return nil, err
	}
	return ConfigOptions(pb)
}

func (c FileConfig) options() []Option {
	var opts []Option
	if c.Default != nil {
		opts = append(opts, WithDefault(c.Default.limit()))
	}
	for _, m := range c.Methods {
		l := m.Limit.limit()
		for _, name := range m.Names {
			opts = append(opts, WithMethod(name, l))
		}
	}
	if cl := c.CallerLimit; cl != nil {
		opts = append(opts, WithCallerRateLimit(cl.keyFunc(), cl.Rate))
		if cl.MaxCallers != 0 {
			opts = append(opts, WithMaxCallers(cl.MaxCallers))
		}
	}
	if c.PriorityHeader != "" {
		opts = append(opts, WithPriorityHeader(c.PriorityHeader))
	}
	if c.DryRun {
		opts = append(opts, WithDryRun())
	}
	return opts
}

// keyFunc returns the KeyFunc c describes; c is valid.
func (c *CallerLimitConfig) keyFunc() KeyFunc {
	switch {
	case c.IP != nil:
		if f, err := c.IP.KeyFunc(); err == nil {
			return f
		}
	case c.PeerIdentity:
		return PeerIdentity
	case c.Metadata != "":
		return MetadataKey(c.Metadata)
	}
	return nil // checked: WithCallerRateLimit reports it
}

// limit builds the Limit that c describes; c is valid.
func (c LimitConfig) limit() Limit {
	if c.Exempt {
		return Limit{Exempt: true}
	}
	l := Limit{Rate: c.Rate, Priority: c.Priority, LIFO: c.Queue.LIFO, DryRun: c.DryRun}
	switch {
	case c.AIMD != nil:
		l.Algorithm = AIMD(*c.AIMD)
	case c.Vegas != nil:
		l.Algorithm = Vegas(*c.Vegas)
	case c.Gradient2 != nil:
		l.Algorithm = Gradient2(*c.Gradient2)
	case c.Fixed != 0:
		l.Algorithm = Fixed(c.Fixed)
	}
	switch {
	case c.Queue.Size != 0:
		l.Queue = limiter.FixedQueue(c.Queue.Size)
	case c.Queue.Target != 0:
		l.Queue = limiter.LittleQueue(c.Queue.Target)
	}
	return l
}

// A ConfigError reports every problem of a configuration at once.
type ConfigError struct {
	// File is the configuration file, if the configuration came from one.
	File string
	// Problems lists the problems in the order of the configuration.
	Problems []ConfigProblem
}

// A ConfigProblem is one invalid field of a configuration.
type ConfigProblem struct {
	// Path is the field, with the names of config.proto:
	// "methods[2].limit.aimd.backoff_ratio".
	Path string
	// Message says what is wrong and what is allowed: "1.2 is not in
	// [0.5, 1)".
	Message string
}

func (p ConfigProblem) String() string { return p.Path + ": " + p.Message }

// Error names the file, if any, and the problem, or the number of
// problems and then each on a line of its own:
//
//	interceptor: invalid config sluice.json: methods[0].name[0]: service is empty
//
//	interceptor: invalid config: 2 problems:
//		default.fixed.limit: 0 is not in [1, 1048576]
//		methods[1].limit.queue.size: -1 is not in [0, 1048576]
func (e *ConfigError) Error() string {
	var b strings.Builder
	b.WriteString("interceptor: invalid config")
	if e.File != "" {
		b.WriteString(" " + e.File)
	}
	if len(e.Problems) == 1 {
		b.WriteString(": " + e.Problems[0].String())
		return b.String()
	}
	fmt.Fprintf(&b, ": %d problems:", len(e.Problems))
	for _, p := range e.Problems {
		b.WriteString("\n\t" + p.String())
	}
	return b.String()
}

// cfgProblems collects ConfigProblems.
type cfgProblems struct {
	list []ConfigProblem
	// skip holds names already reported by ToConfig, which cfgCheck
	// leaves alone.
	skip map[*sluicev1.MethodConfig_Name]bool
}

// add records a problem of path, unless path has one already.
func (ps *cfgProblems) add(path, format string, args ...any) {
	for _, p := range ps.list {
		if p.Path == path {
			return
		}
	}
	ps.list = append(ps.list, ConfigProblem{Path: path, Message: fmt.Sprintf(format, args...)})
}

func (ps *cfgProblems) err() error {
	if len(ps.list) == 0 {
		return nil
	}
	return &ConfigError{Problems: ps.list}
}

// FromConfig validates c and converts it to its Go form. A nil c is the
// empty FileConfig. The error, if any, is a *ConfigError listing every
// problem.
func FromConfig(c *sluicev1.Config) (FileConfig, error) {
	var ps cfgProblems
	cfgCheck(&ps, c)
	if err := ps.err(); err != nil {
		return FileConfig{}, err
	}
	var fc FileConfig
	if c.GetDefault() != nil {
		l := cfgFromLimit(c.GetDefault())
		fc.Default = &l
	}
	for _, m := range c.GetMethods() {
		mc := MethodConfig{Limit: cfgFromLimit(m.GetLimit())}
		for _, n := range m.GetName() {
			mc.Names = append(mc.Names, "/"+n.GetService()+"/"+n.GetMethod())
		}
		fc.Methods = append(fc.Methods, mc)
	}
	if cl := c.GetCallerLimit(); cl != nil {
		r := cl.GetRateLimit()
		clc := &CallerLimitConfig{
			Rate:       RateLimit{PerSecond: r.GetPerSecond(), Burst: int(r.GetBurst())},
			MaxCallers: int(cl.GetMaxCallers()),
		}
		switch k := cl.GetKey().(type) {
		case *sluicev1.CallerLimit_Ip:
			ip := &IPKey{
				IPv4Prefix: int(k.Ip.GetIpv4Prefix()),
				IPv6Prefix: int(k.Ip.GetIpv6Prefix()),
				Header:     k.Ip.GetHeader(),
			}
			for _, p := range k.Ip.GetTrustedProxies() {
				ip.TrustedProxies = append(ip.TrustedProxies, netip.MustParsePrefix(p)) // checked
			}
			clc.IP = ip
		case *sluicev1.CallerLimit_PeerIdentity:
			clc.PeerIdentity = true
		case *sluicev1.CallerLimit_Metadata:
			clc.Metadata = k.Metadata.GetHeader()
		}
		fc.CallerLimit = clc
	}
	fc.PriorityHeader = c.GetPriorityHeader()
	fc.DryRun = c.GetDryRun()
	return fc, nil
}

// cfgFromLimit converts a valid Limit; nil is the zero LimitConfig.
func cfgFromLimit(l *sluicev1.Limit) LimitConfig {
	var c LimitConfig
	if l.GetExempt() {
		c.Exempt = true
		return c
	}
	c.DryRun = l.GetDryRun()
	switch alg := l.GetAlgorithm().(type) {
	case *sluicev1.Limit_Aimd:
		a := alg.Aimd
		c.AIMD = &limiter.AIMDConfig{
			InitialLimit: int(a.GetInitialLimit()),
			MinLimit:     int(a.GetMinLimit()),
			MaxLimit:     int(a.GetMaxLimit()),
			BackoffRatio: a.GetBackoffRatio(),
			Timeout:      a.GetTimeout().AsDuration(),
			PerCall:      a.GetPerCall(),
		}
	case *sluicev1.Limit_Vegas:
		v := alg.Vegas
		c.Vegas = &limiter.VegasConfig{
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
		c.Gradient2 = &limiter.Gradient2Config{
			InitialLimit: int(g.GetInitialLimit()),
			MinLimit:     int(g.GetMinLimit()),
			MaxLimit:     int(g.GetMaxLimit()),
			QueueSize:    int(g.GetQueueSize()),
			Smoothing:    g.GetSmoothing(),
			LongWindow:   int(g.GetLongWindow()),
		}
	case *sluicev1.Limit_Fixed:
		c.Fixed = int(alg.Fixed.GetLimit())
	}
	q := l.GetQueue()
	c.Queue = QueueConfig{Size: int(q.GetSize()), Target: q.GetTarget().AsDuration(), LIFO: q.GetLifo()}
	c.Rate = RateLimit{PerSecond: l.GetRateLimit().GetPerSecond(), Burst: int(l.GetRateLimit().GetBurst())}
	c.Priority = cfgFromPriority[l.GetPriority()]
	return c
}

var cfgFromPriority = map[sluicev1.Priority]Priority{
	sluicev1.Priority_PRIORITY_UNSPECIFIED: PriorityDefault,
	sluicev1.Priority_PRIORITY_DEFAULT:     PriorityDefault,
	sluicev1.Priority_PRIORITY_CRITICAL:    PriorityCritical,
	sluicev1.Priority_PRIORITY_SHEDDABLE:   PrioritySheddable,
}

// ToConfig converts c to its protobuf form and validates it. Problems are
// named by their path in the protobuf form. Zero values are left unset,
// so ToConfig(FromConfig(x)) equals x up to fields that say "the default"
// explicitly (a zero queue size, PRIORITY_DEFAULT).
func ToConfig(c FileConfig) (*sluicev1.Config, error) {
	var ps cfgProblems
	pb := &sluicev1.Config{}
	if c.Default != nil {
		pb.Default = cfgToLimit(&ps, "default", *c.Default)
	}
	for i, m := range c.Methods {
		path := fmt.Sprintf("methods[%d]", i)
		mc := &sluicev1.MethodConfig{Limit: cfgToLimit(&ps, path+".limit", m.Limit)}
		for j, name := range m.Names {
			mc.Name = append(mc.Name, cfgToName(&ps, fmt.Sprintf("%s.name[%d]", path, j), name))
		}
		pb.Methods = append(pb.Methods, mc)
	}
	if cl := c.CallerLimit; cl != nil {
		pb.CallerLimit = cfgToCallerLimit(&ps, *cl)
	}
	pb.PriorityHeader = c.PriorityHeader
	pb.DryRun = c.DryRun
	cfgCheck(&ps, pb)
	// Conversion problems came first; put them in the configuration's order.
	slices.SortStableFunc(ps.list, func(a, b ConfigProblem) int {
		return slices.Compare(cfgOrder(a.Path), cfgOrder(b.Path))
	})
	if err := ps.err(); err != nil {
		return nil, err
	}
	return pb, nil
}

// cfgOrder is the position of path in a configuration: the default, then
// each entry's names in order, then its limit, then the caller limit and
// the priority header.
func cfgOrder(path string) []int {
	switch {
	case strings.HasPrefix(path, "caller_limit"):
		return []int{2}
	case strings.HasPrefix(path, "priority_header"):
		return []int{3}
	}
	rest, ok := strings.CutPrefix(path, "methods[")
	if !ok {
		return []int{0}
	}
	i, rest, _ := strings.Cut(rest, "]")
	entry, _ := strconv.Atoi(i)
	rest, ok = strings.CutPrefix(rest, ".name")
	if !ok {
		return []int{1, entry, 1}
	}
	name := -1
	if i, ok := strings.CutPrefix(rest, "["); ok {
		i, _, _ = strings.Cut(i, "]")
		name, _ = strconv.Atoi(i)
	}
	return []int{1, entry, 0, name}
}

// cfgToName splits "/package.Service/Method" or "/package.Service/"; what is
// inside the parts is left to cfgCheckName.
func cfgToName(ps *cfgProblems, path, name string) *sluicev1.MethodConfig_Name {
	rest, ok := strings.CutPrefix(name, "/")
	service, method, ok2 := strings.Cut(rest, "/")
	n := &sluicev1.MethodConfig_Name{Service: service, Method: method}
	if !ok || !ok2 {
		ps.add(path, "%q is not \"/package.Service/Method\" or \"/package.Service/\"", name)
		if ps.skip == nil {
			ps.skip = map[*sluicev1.MethodConfig_Name]bool{}
		}
		ps.skip[n] = true
	}
	return n
}

func cfgToLimit(ps *cfgProblems, path string, c LimitConfig) *sluicev1.Limit {
	l := &sluicev1.Limit{Exempt: c.Exempt, DryRun: c.DryRun}
	var algs []string
	if a := c.AIMD; a != nil {
		p := path + ".aimd"
		algs = append(algs, "aimd")
		aimd := &sluicev1.Aimd{
			InitialLimit: cfgInt32(ps, p+".initial_limit", a.InitialLimit),
			MinLimit:     cfgInt32(ps, p+".min_limit", a.MinLimit),
			MaxLimit:     cfgInt32(ps, p+".max_limit", a.MaxLimit),
			BackoffRatio: a.BackoffRatio,
			PerCall:      a.PerCall,
		}
		if a.Timeout != 0 {
			aimd.Timeout = durationpb.New(a.Timeout)
		}
		l.Algorithm = &sluicev1.Limit_Aimd{Aimd: aimd}
	}
	if v := c.Vegas; v != nil {
		p := path + ".vegas"
		algs = append(algs, "vegas")
		l.Algorithm = &sluicev1.Limit_Vegas{Vegas: &sluicev1.Vegas{
			InitialLimit:    cfgInt32(ps, p+".initial_limit", v.InitialLimit),
			MinLimit:        cfgInt32(ps, p+".min_limit", v.MinLimit),
			MaxLimit:        cfgInt32(ps, p+".max_limit", v.MaxLimit),
			Alpha:           v.Alpha,
			Beta:            v.Beta,
			Smoothing:       v.Smoothing,
			ProbeMultiplier: cfgInt32(ps, p+".probe_multiplier", v.ProbeMultiplier),
		}}
	}
	if g := c.Gradient2; g != nil {
		p := path + ".gradient2"
		algs = append(algs, "gradient2")
		l.Algorithm = &sluicev1.Limit_Gradient2{Gradient2: &sluicev1.Gradient2{
			InitialLimit: cfgInt32(ps, p+".initial_limit", g.InitialLimit),
			MinLimit:     cfgInt32(ps, p+".min_limit", g.MinLimit),
			MaxLimit:     cfgInt32(ps, p+".max_limit", g.MaxLimit),
			QueueSize:    cfgInt32(ps, p+".queue_size", g.QueueSize),
			Smoothing:    g.Smoothing,
			LongWindow:   cfgInt32(ps, p+".long_window", g.LongWindow),
		}}
	}
	if c.Fixed != 0 {
		algs = append(algs, "fixed")
		l.Algorithm = &sluicev1.Limit_Fixed{Fixed: &sluicev1.Fixed{Limit: cfgInt32(ps, path+".fixed.limit", c.Fixed)}}
	}
	if len(algs) > 1 {
		ps.add(path, "sets more than one algorithm (%s)", strings.Join(algs, ", "))
	}
	if q := c.Queue; q != (QueueConfig{}) {
		l.Queue = &sluicev1.Queue{Lifo: q.LIFO}
		switch {
		case q.Size != 0 && q.Target != 0:
			ps.add(path+".queue", "sets both size (%d) and target (%v)", q.Size, q.Target)
		case q.Size != 0:
			l.Queue.Bound = &sluicev1.Queue_Size{Size: cfgInt32(ps, path+".queue.size", q.Size)}
		case q.Target != 0:
			l.Queue.Bound = &sluicev1.Queue_Target{Target: durationpb.New(q.Target)}
		}
	}
	if c.Rate != (RateLimit{}) {
		l.RateLimit = &sluicev1.RateLimit{PerSecond: c.Rate.PerSecond, Burst: cfgInt32(ps, path+".rate_limit.burst", c.Rate.Burst)}
	}
	switch c.Priority {
	case PriorityDefault:
	case PriorityCritical:
		l.Priority = sluicev1.Priority_PRIORITY_CRITICAL
	case PrioritySheddable:
		l.Priority = sluicev1.Priority_PRIORITY_SHEDDABLE
	default:
		ps.add(path+".priority", "%v is not PriorityCritical, PriorityDefault or PrioritySheddable", c.Priority)
	}
	return l
}

func cfgToCallerLimit(ps *cfgProblems, c CallerLimitConfig) *sluicev1.CallerLimit {
	const path = "caller_limit"
	cl := &sluicev1.CallerLimit{
		RateLimit:  &sluicev1.RateLimit{PerSecond: c.Rate.PerSecond, Burst: cfgInt32(ps, path+".rate_limit.burst", c.Rate.Burst)},
		MaxCallers: cfgInt32(ps, path+".max_callers", c.MaxCallers),
	}
	var keys []string
	if k := c.IP; k != nil {
		keys = append(keys, "ip")
		ip := &sluicev1.IpKey{
			Ipv4Prefix: cfgInt32(ps, path+".ip.ipv4_prefix", k.IPv4Prefix),
			Ipv6Prefix: cfgInt32(ps, path+".ip.ipv6_prefix", k.IPv6Prefix),
			Header:     k.Header,
		}
		for _, p := range k.TrustedProxies {
			ip.TrustedProxies = append(ip.TrustedProxies, p.String())
		}
		cl.Key = &sluicev1.CallerLimit_Ip{Ip: ip}
	}
	if c.PeerIdentity {
		keys = append(keys, "peer_identity")
		cl.Key = &sluicev1.CallerLimit_PeerIdentity{PeerIdentity: &sluicev1.PeerIdentityKey{}}
	}
	if c.Metadata != "" {
		keys = append(keys, "metadata")
		cl.Key = &sluicev1.CallerLimit_Metadata{Metadata: &sluicev1.MetadataKey{Header: c.Metadata}}
	}
	if len(keys) > 1 {
		ps.add(path, "sets more than one key (%s)", strings.Join(keys, ", "))
	}
	return cl
}

func cfgInt32(ps *cfgProblems, path string, v int) int32 {
	if v < math.MinInt32 || v > math.MaxInt32 {
		ps.add(path, "%d is out of the range of int32", v)
		return 0
	}
	return int32(v)
}

// cfgCheck adds every problem of c to ps. The ranges mirror those of
// package limiter and of NewServer, checked here so that each problem is
// named by its exact path.
func cfgCheck(ps *cfgProblems, c *sluicev1.Config) {
	if c.GetDefault() != nil {
		cfgCheckLimit(ps, "default", c.GetDefault())
	}
	type where struct{ entry, name int }
	seen := map[string]where{} // full name -> where it was first configured
	for i, m := range c.GetMethods() {
		path := fmt.Sprintf("methods[%d]", i)
		if len(m.GetName()) == 0 {
			ps.add(path+".name", "is empty: name at least one service, or a service and a method")
		}
		for j, n := range m.GetName() {
			np := fmt.Sprintf("%s.name[%d]", path, j)
			if ps.skip[n] {
				continue
			}
			full, ok := cfgCheckName(ps, np, n)
			if !ok {
				continue
			}
			prev, dup := seen[full]
			switch {
			case !dup:
				seen[full] = where{i, j}
			case prev.entry == i:
				ps.add(np, "%q is already configured by %s.name[%d]", full, path, prev.name)
			default:
				ps.add(np, "%q is already configured by methods[%d]", full, prev.entry)
			}
		}
		cfgCheckLimit(ps, path+".limit", m.GetLimit())
	}
	if cl := c.GetCallerLimit(); cl != nil {
		cfgCheckCallerLimit(ps, "caller_limit", cl)
	}
	if h := c.GetPriorityHeader(); h != "" {
		cfgCheckHeader(ps, "priority_header", h)
	}
}

func cfgCheckCallerLimit(ps *cfgProblems, path string, cl *sluicev1.CallerLimit) {
	r := cl.GetRateLimit()
	rate, burst := r.GetPerSecond(), r.GetBurst()
	rateOK := rate >= ratelimit.MinRate && rate <= ratelimit.MaxRate
	if !rateOK {
		ps.add(path+".rate_limit.per_second", "%v is not in [%g, %g]: each caller's quota is required", rate, ratelimit.MinRate, ratelimit.MaxRate)
	}
	switch {
	case burst < 0:
		ps.add(path+".rate_limit.burst", "%d is not >= 0", burst)
	case rateOK:
		b := RateLimit{PerSecond: rate, Burst: int(burst)}.burst()
		if interval := math.Round(1e9 / rate); interval*float64(b) > 1<<61 {
			ps.add(path+".rate_limit.burst", "%d at %v a second takes more than 73 years to refill", b, rate)
		}
	}
	switch k := cl.GetKey().(type) {
	case nil:
		ps.add(path, "sets no key: set ip, peer_identity or metadata")
	case *sluicev1.CallerLimit_Ip:
		p := path + ".ip"
		if n := k.Ip.GetIpv4Prefix(); n < 0 || n > 32 {
			ps.add(p+".ipv4_prefix", "%d is not in [1, 32] (0 for %d)", n, DefaultIPv4Prefix)
		}
		if n := k.Ip.GetIpv6Prefix(); n < 0 || n > 128 {
			ps.add(p+".ipv6_prefix", "%d is not in [1, 128] (0 for %d)", n, DefaultIPv6Prefix)
		}
		for i, s := range k.Ip.GetTrustedProxies() {
			if _, err := netip.ParsePrefix(s); err != nil {
				ps.add(fmt.Sprintf("%s.trusted_proxies[%d]", p, i), "%q is not a network in CIDR form, such as \"10.0.0.0/8\" or \"2001:db8::/32\"", s)
			}
		}
		if h := k.Ip.GetHeader(); h != "" {
			if len(k.Ip.GetTrustedProxies()) == 0 {
				ps.add(p+".header", "%q is set but trusted_proxies is empty: a header is only believed from a trusted proxy", h)
			} else {
				cfgCheckHeader(ps, p+".header", h)
			}
		}
	case *sluicev1.CallerLimit_Metadata:
		if h := k.Metadata.GetHeader(); h == "" {
			ps.add(path+".metadata.header", "is empty: name the header, such as \"x-api-key\"")
		} else {
			cfgCheckHeader(ps, path+".metadata.header", h)
		}
	}
	if n := cl.GetMaxCallers(); n < 0 {
		ps.add(path+".max_callers", "%d is not in [1, %d] (0 for %d)", n, math.MaxInt32, DefaultMaxCallers)
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

// cfgCheckName checks one {service, method} and returns its full name,
// "/package.Service/Method" or "/package.Service/".
func cfgCheckName(ps *cfgProblems, path string, n *sluicev1.MethodConfig_Name) (string, bool) {
	service, method := n.GetService(), n.GetMethod()
	ok := true
	bad := func(format string, args ...any) {
		ps.add(path, format, args...)
		ok = false
	}
	switch {
	case service == "":
		bad("service is empty")
	case strings.Contains(service, "/"):
		bad("service %q contains '/': want a full service name, \"package.Service\"", service)
	case cfgHasSpace(service):
		bad("service %q contains spaces or control characters", service)
	case strings.HasPrefix(service, ".") || strings.HasSuffix(service, ".") || strings.Contains(service, ".."):
		bad("service %q has an empty name part", service)
	}
	switch {
	case strings.Contains(method, "/"):
		bad("method %q contains '/': want a method name, or nothing for the whole service", method)
	case cfgHasSpace(method):
		bad("method %q contains spaces or control characters", method)
	}
	return "/" + service + "/" + method, ok
}

func cfgHasSpace(s string) bool {
	return strings.ContainsFunc(s, func(r rune) bool { return r <= ' ' || r == 0x7f })
}

func cfgCheckLimit(ps *cfgProblems, path string, l *sluicev1.Limit) {
	if l == nil {
		return
	}
	if l.GetExempt() {
		var set []string
		if l.GetAlgorithm() != nil {
			set = append(set, cfgAlgorithm(l))
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
		return
	}
	switch alg := l.GetAlgorithm().(type) {
	case *sluicev1.Limit_Aimd:
		cfgCheckAIMD(ps, path+".aimd", alg.Aimd)
	case *sluicev1.Limit_Vegas:
		cfgCheckVegas(ps, path+".vegas", alg.Vegas)
	case *sluicev1.Limit_Gradient2:
		cfgCheckGradient2(ps, path+".gradient2", alg.Gradient2)
	case *sluicev1.Limit_Fixed:
		if n := alg.Fixed.GetLimit(); n < 1 || n > limiter.MaxLimit {
			ps.add(path+".fixed.limit", "%d is not in [1, %d]", n, limiter.MaxLimit)
		}
	}
	if q := l.GetQueue(); q != nil {
		switch b := q.GetBound().(type) {
		case *sluicev1.Queue_Size:
			if b.Size < 0 || b.Size > limiter.MaxLimit {
				ps.add(path+".queue.size", "%d is not in [0, %d]", b.Size, limiter.MaxLimit)
			}
		case *sluicev1.Queue_Target:
			if d, ok := cfgCheckDuration(ps, path+".queue.target", b.Target); ok && d <= 0 {
				ps.add(path+".queue.target", "%v is not > 0", d)
			}
		}
	}
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
	}
}

func cfgAlgorithm(l *sluicev1.Limit) string {
	switch l.GetAlgorithm().(type) {
	case *sluicev1.Limit_Aimd:
		return "aimd"
	case *sluicev1.Limit_Vegas:
		return "vegas"
	case *sluicev1.Limit_Gradient2:
		return "gradient2"
	}
	return "fixed"
}

// cfgCheckDuration checks that d is a valid duration within the range of a
// time.Duration and returns it. A nil d is 0.
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

// A cfgSetting is a configured number, or the default that stands for it.
type cfgSetting[T int | float64] struct {
	v   T
	def bool // v is the default, not set in the configuration
}

func (s cfgSetting[T]) String() string {
	if s.def {
		return fmt.Sprintf("default %v", s.v)
	}
	return fmt.Sprint(s.v)
}

// cfgOrDefault is v, or def when v is 0 (unset).
func cfgOrDefault[T int | float64](v, def T) cfgSetting[T] {
	if v == 0 {
		return cfgSetting[T]{def, true}
	}
	return cfgSetting[T]{v, false}
}

// cfgCheckLimits checks the initial, min and max limits of an algorithm,
// with the algorithm's defaults applied. A default derived from a value
// out of range is not reported again.
func cfgCheckLimits(ps *cfgProblems, path string, initial, minimum, maximum cfgSetting[int]) {
	ok := true
	for _, f := range []struct {
		name string
		s    cfgSetting[int]
	}{{"initial_limit", initial}, {"min_limit", minimum}, {"max_limit", maximum}} {
		if f.s.v < 1 || f.s.v > limiter.MaxLimit {
			if !f.s.def {
				ps.add(path+"."+f.name, "%v is not in [1, %d]", f.s, limiter.MaxLimit)
			}
			ok = false
		}
	}
	if !ok {
		return
	}
	switch {
	case minimum.v > maximum.v:
		ps.add(path+".min_limit", "%v is not <= max_limit (%v)", minimum, maximum)
	case initial.v < minimum.v || initial.v > maximum.v:
		ps.add(path+".initial_limit", "%v is not in [min_limit, max_limit] = [%d, %d]", initial, minimum.v, maximum.v)
	}
}

// cfgCheckAIMD, cfgCheckVegas and cfgCheckGradient2 apply the defaults of
// limiter.AIMDConfig, VegasConfig and Gradient2Config as those types do,
// and check the same ranges.
func cfgCheckAIMD(ps *cfgProblems, path string, a *sluicev1.Aimd) {
	minimum, maximum := int(a.GetMinLimit()), int(a.GetMaxLimit())
	initial := cfgOrDefault(int(a.GetInitialLimit()), limiter.DefaultAIMDInitialLimit)
	if initial.def {
		if minimum > initial.v {
			initial.v = minimum
		}
		if maximum > 0 && maximum < initial.v {
			initial.v = maximum
		}
	}
	cfgCheckLimits(ps, path, initial, cfgOrDefault(minimum, limiter.DefaultAIMDMinLimit),
		cfgOrDefault(maximum, max(limiter.DefaultAIMDMaxLimit, initial.v)))
	if r := a.GetBackoffRatio(); r != 0 && !(r >= 0.5 && r < 1) {
		ps.add(path+".backoff_ratio", "%v is not in [0.5, 1)", r)
	}
	if d, ok := cfgCheckDuration(ps, path+".timeout", a.GetTimeout()); ok && d < 0 {
		ps.add(path+".timeout", "%v is not >= 0", d)
	}
}

func cfgCheckVegas(ps *cfgProblems, path string, v *sluicev1.Vegas) {
	initial := cfgOrDefault(int(v.GetInitialLimit()), 20)
	cfgCheckLimits(ps, path, initial, cfgOrDefault(int(v.GetMinLimit()), 1),
		cfgOrDefault(int(v.GetMaxLimit()), max(1000, initial.v)))
	alpha := cfgOrDefault(v.GetAlpha(), 3)
	if !(alpha.v > 0) {
		ps.add(path+".alpha", "%v is not > 0", alpha)
	} else if beta := cfgOrDefault(v.GetBeta(), 6); !(beta.v > alpha.v) {
		ps.add(path+".beta", "%v is not > alpha (%v)", beta, alpha)
	}
	cfgCheckSmoothing(ps, path+".smoothing", v.GetSmoothing())
	if n := v.GetProbeMultiplier(); n < 0 {
		ps.add(path+".probe_multiplier", "%d is not >= 1", n)
	}
}

func cfgCheckGradient2(ps *cfgProblems, path string, g *sluicev1.Gradient2) {
	initial := cfgOrDefault(int(g.GetInitialLimit()), 20)
	cfgCheckLimits(ps, path, initial, cfgOrDefault(int(g.GetMinLimit()), 1),
		cfgOrDefault(int(g.GetMaxLimit()), max(200, initial.v)))
	if n := g.GetQueueSize(); n < 0 {
		ps.add(path+".queue_size", "%d is not >= 0", n)
	}
	cfgCheckSmoothing(ps, path+".smoothing", g.GetSmoothing())
	if n := g.GetLongWindow(); n < 0 {
		ps.add(path+".long_window", "%d is not >= 1", n)
	}
}

func cfgCheckSmoothing(ps *cfgProblems, path string, s float64) {
	if s != 0 && !(s > 0 && s <= 1) {
		ps.add(path, "%v is not in (0, 1]", s)
	}
}
