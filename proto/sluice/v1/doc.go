// Package sluicev1 holds the protobuf API of sluice, generated from the
// .proto files beside it by `make generate`: LimitsService, the admin
// service that package admin implements.
package sluicev1
