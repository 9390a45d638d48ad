// Package grpcname checks the gRPC method and service names sluice is
// configured with, in code and in configuration files: their syntax, and
// whether the protobuf definitions linked into the program can serve them.
package grpcname

import (
	"fmt"
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
// so NewServer cannot do better than the registry by itself.

// maxListedMethods bounds how many of a service's methods an error lists.
const maxListedMethods = 10

// LinkedFault checks service and method (a valid name; method "" for a
// service entry) against the protobuf files linked into the program and
// says why the name cannot be served, or "" if it can be or is unknown.
func LinkedFault(service, method string) string {
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

// Linked reports whether service is a protobuf service linked into the
// program, whose methods LinkedFault has checked.
func Linked(service string) bool {
	d, err := protoregistry.GlobalFiles.FindDescriptorByName(protoreflect.FullName(service))
	if err != nil {
		return false
	}
	_, ok := d.(protoreflect.ServiceDescriptor)
	return ok
}

// Kind is what is wrong with a service or method name.
type Kind int

const (
	OK        Kind = iota
	Empty          // the service is empty
	Slash          // a '/' inside the service or the method
	Space          // spaces or control characters
	EmptyPart      // the service has an empty dotted part
)

// A Fault is the first problem Check found, and where.
type Fault struct {
	Kind     Kind
	InMethod bool   // in the method rather than the service
	Part     string // the service or the method
}

// Check checks the service and method of a name: the one check behind
// WithMethod names (validMethod) and the names of a config file, which
// word the fault each their own way. The service comes first.
func Check(service, method string) Fault {
	hasSpace := func(s string) bool {
		return strings.ContainsFunc(s, func(r rune) bool { return r <= ' ' || r == 0x7f })
	}
	switch {
	case service == "":
		return Fault{Kind: Empty}
	case strings.Contains(service, "/"):
		return Fault{Kind: Slash, Part: service}
	case hasSpace(service):
		return Fault{Kind: Space, Part: service}
	case strings.HasPrefix(service, ".") || strings.HasSuffix(service, ".") || strings.Contains(service, ".."):
		return Fault{Kind: EmptyPart, Part: service}
	case strings.Contains(method, "/"):
		return Fault{Kind: Slash, InMethod: true, Part: method}
	case hasSpace(method):
		return Fault{Kind: Space, InMethod: true, Part: method}
	}
	return Fault{}
}

// CodeMessage words f for a full name, "/package.Service/Method".
func (f Fault) CodeMessage() string {
	switch f.Kind {
	case Empty:
		return "has an empty service"
	case Slash:
		return "has more than two '/'"
	case Space:
		return "contains spaces or control characters"
	}
	return "has an empty package or service name part"
}

// FileMessage words f for the service and method fields of a file.
func (f Fault) FileMessage() string {
	what := "service"
	if f.InMethod {
		what = "method"
	}
	switch {
	case f.Kind == Empty:
		return "service is empty"
	case f.Kind == Slash && f.InMethod:
		return fmt.Sprintf("method %q contains '/': want a method name, or nothing for the whole service", f.Part)
	case f.Kind == Slash:
		return fmt.Sprintf("service %q contains '/': want a full service name, \"package.Service\"", f.Part)
	case f.Kind == Space:
		return fmt.Sprintf("%s %q contains spaces or control characters", what, f.Part)
	}
	return fmt.Sprintf("service %q has an empty name part", f.Part)
}
