// Package fileopt carries from package interceptor to package config the
// options that only a configuration file gives, which interceptor does
// not export. interceptor sets the funcs when it is initialized, before
// config, which imports it, can run. Options travel as any: this package
// cannot name interceptor's types, since interceptor imports it.
package fileopt

import "github.com/sluice-go/sluice/callerkey"

var (
	// FromFile marks an interceptor.ServerOption as a configuration
	// file's: a Reload replaces such options whole instead of layering
	// over them, so that an entry removed from the file is gone.
	FromFile func(opt any) any
	// CallerQuota is the file's caller_limit, a quota of perSecond and
	// burst per caller kept in this process for at most maxCallers
	// callers (0: the default). A Reload with the same quota keeps the
	// callers' state.
	CallerQuota func(key callerkey.Func, perSecond float64, burst, maxCallers int) any
	// PriorityHeader is the file's priority_header: it names the header
	// and leaves the rest of the code's interceptor.Priorities as set.
	PriorityHeader func(header string) any
)
