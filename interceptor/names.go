package interceptor

import (
	"context"
	"fmt"
	"log/slog"
	"strings"
)

// warnUnchecked runs at the first call a Server sees with table t: it
// logs, once per name for the life of s, the configured names that
// neither the registry nor CheckRegistered could check. A call of a
// registered method (served) of such a name's service checks it.
func (s *Server) warnUnchecked(ctx context.Context, t *table, fullMethod string, served bool) {
	if t.checked.Swap(true) {
		return
	}
	service, _, _ := strings.Cut(strings.TrimPrefix(fullMethod, "/"), "/")
	l := t.logger
	if l == nil {
		l = slog.Default()
	}
	s.warnMu.Lock()
	defer s.warnMu.Unlock()
	for _, name := range t.unchecked {
		if served && (name == fullMethod || name == "/"+service+"/") {
			continue
		}
		if s.warned[name] {
			continue
		}
		if s.warned == nil {
			s.warned = map[string]bool{}
		}
		s.warned[name] = true
		svc, _, _ := strings.Cut(name[1:], "/")
		l.LogAttrs(ctx, slog.LevelWarn, "sluice: configured name could not be checked: if this server does not serve it, its entry does nothing",
			slog.String("name", name),
			slog.String("why", fmt.Sprintf("no protobuf service %s is linked into this program", svc)),
			slog.String("fix", "check the name for a typo; Server.CheckRegistered(grpcServer) checks it exactly and silences this warning"))
	}
}
