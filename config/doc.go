// Package config reads sluice's configuration files: the protobuf JSON
// form of sluice.v1.Config (proto/sluice/v1/config.proto), which sets the
// limits of a server's methods, a per-caller quota, the priority header
// and dry runs. Load and Parse return the []interceptor.ServerOption a file
// describes, with every problem of the file at once, each at its path;
// Watch reloads a running interceptor.Server when the file changes.
//
//	opts, err := config.Load("sluice.json")
//	...
//	limits, err := interceptor.NewServer(opts...)
//	...
//	go config.Watch(ctx, "sluice.json", 10*time.Second, limits, nil)
//
// testdata/config/README.md explains a file that sets every field.
package config
