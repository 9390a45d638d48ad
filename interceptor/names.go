package interceptor

import (
	"context"
	"fmt"
	"log/slog"
	"strings"

	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/reflect/protoregistry"
)

// A configured name that no server serves leaves its method on the
// default Limit without a word. Names are checked twice:
//
//   - at construction, against the protobuf services linked into the
//     program (generated code registers them in protoregistry.GlobalFiles):
//     a method its linked service does not declare, or a service that
//     differs from a linked one only in case, cannot be served and is an
//     error, as is any other invalid name;
//   - at a Server's first call, the names whose service is not linked
//     (a service without generated protobuf code, or a typo in a service
//     name) are logged once each as a warning, unless CheckRegistered,
//     which sees what the grpc.Server serves, has checked them.
//
// grpc-go gives interceptors no way to list the services of their server,
// so ServerOptions cannot do better than the registry by itself.

// maxListedMethods bounds how many of a service's methods an error lists.
const maxListedMethods = 10

// linkedFault checks service and method (a valid name; method "" for a
// service entry) against the protobuf files linked into the program and
// says why the name cannot be served, or "" if it can be or is unknown.
func linkedFault(service, method string) string {
	d, err := protoregistry.GlobalFiles.FindDescriptorByName(protoreflect.FullName(service))
	if err != nil {
		if other := linkedServiceFold(service); other != "" {
			return fmt.Sprintf("no service %s is linked into this program; did you mean %s? (names are case-sensitive)", service, other)
		}
		return ""
	}
	sd, ok := d.(protoreflect.ServiceDescriptor)
	if !ok {
		return fmt.Sprintf("%s is a protobuf %s, not a service", service, descriptorKind(d))
	}
	if method == "" || sd.Methods().ByName(protoreflect.Name(method)) != nil {
		return ""
	}
	ms := sd.Methods()
	var names []string
	for i := range ms.Len() {
		name := string(ms.Get(i).Name())
		if strings.EqualFold(name, method) {
			return fmt.Sprintf("service %s has no method %s; did you mean %s? (names are case-sensitive)", service, method, name)
		}
		names = append(names, name)
	}
	more := ""
	if len(names) > maxListedMethods {
		more = fmt.Sprintf(" and %d more", len(names)-maxListedMethods)
		names = names[:maxListedMethods]
	}
	return fmt.Sprintf("service %s has no method %s; its methods are %s%s", service, method, strings.Join(names, ", "), more)
}

// linkedServiceFold returns the full name of a linked service equal to
// service under case folding, or "".
func linkedServiceFold(service string) string {
	var found string
	protoregistry.GlobalFiles.RangeFiles(func(f protoreflect.FileDescriptor) bool {
		if !strings.EqualFold(string(f.Package()), packageOf(service)) {
			return true
		}
		ss := f.Services()
		for i := range ss.Len() {
			if name := string(ss.Get(i).FullName()); strings.EqualFold(name, service) {
				found = name
				return false
			}
		}
		return true
	})
	return found
}

// packageOf is the package of a full service name: "a.b" of "a.b.Svc".
func packageOf(service string) string {
	if i := strings.LastIndexByte(service, '.'); i >= 0 {
		return service[:i]
	}
	return ""
}

func descriptorKind(d protoreflect.Descriptor) string {
	switch d.(type) {
	case protoreflect.MessageDescriptor:
		return "message"
	case protoreflect.EnumDescriptor:
		return "enum"
	case protoreflect.EnumValueDescriptor:
		return "enum value"
	case protoreflect.FieldDescriptor:
		return "field"
	case protoreflect.MethodDescriptor:
		return "method"
	}
	return "declaration"
}

// linked reports whether service is a protobuf service linked into the
// program, whose methods linkedFault has checked.
func linked(service string) bool {
	d, err := protoregistry.GlobalFiles.FindDescriptorByName(protoreflect.FullName(service))
	if err != nil {
		return false
	}
	_, ok := d.(protoreflect.ServiceDescriptor)
	return ok
}

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
