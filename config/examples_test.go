package config_test

import (
	"log"

	"google.golang.org/grpc"

	"github.com/sluice-go/sluice/config"
	"github.com/sluice-go/sluice/interceptor"
)

// The README's configuration file: a server's limits from sluice.json.
func ExampleLoad() {
	opts, err := config.Load("sluice.json") // package github.com/sluice-go/sluice/config
	if err != nil {
		log.Fatal(err) // every problem at once, each with its path and allowed range
	}
	limits, err := interceptor.NewServer(opts...)

	if err != nil {
		log.Fatal(err)
	}
	_ = grpc.NewServer(limits.ServerOptions()...)
}
