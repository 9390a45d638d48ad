// Package testpb is the test service of sluice's tests, examples and
// benchmarks: the code generated from testdata/proto/sluice/test/v1 by
// `make generate`, and Service, an implementation whose handlers each test
// sets.
package testpb
