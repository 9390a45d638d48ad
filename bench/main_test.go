package bench

import (
	"testing"

	"github.com/zeromicro/go-zero/core/logx"
	"go.uber.org/goleak"
)

// Linking go-zero's load package and Kratos's bbr package starts goroutines
// from their packages' init functions, before any test runs and whether or
// not a peer is built; none of them ever ends. They are ignored by name,
// each of them only, so that a goroutine leaked by an adapter or a test
// still fails the run. The names are those of the versions in go.mod (the
// init.N numbering may change on upgrade; goleak then names the new one).
var peerInitGoroutines = []goleak.Option{
	// go-zero core/stat: samples CPU use every 250 ms for the shedder and
	// logs resource usage once a minute.
	goleak.IgnoreAnyFunction("github.com/zeromicro/go-zero/core/stat.init.1.func1"),
	// go-zero core/proc: handles SIGUSR1, SIGUSR2, SIGTERM and SIGINT.
	goleak.IgnoreAnyFunction("github.com/zeromicro/go-zero/core/proc.init.1.func1"),
	// Kratos aegis internal/cpu: samples CPU use every 500 ms.
	goleak.IgnoreAnyFunction("github.com/go-kratos/aegis/internal/cpu.init.0.func1"),
	// Kratos aegis bbr: folds those samples into a moving average.
	goleak.IgnoreAnyFunction("github.com/go-kratos/aegis/ratelimit/bbr.cpuproc"),
}

func TestMain(m *testing.M) {
	// go-zero logs the process's resource usage to stdout once a minute,
	// which lands in the middle of benchmark result lines. Only that
	// "stat" log level is turned off: the shedder's behaviour, and its
	// logging of rejections, are unchanged.
	logx.DisableStat()
	goleak.VerifyTestMain(m, peerInitGoroutines...)
}
