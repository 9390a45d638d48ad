package main

import (
	"context"
	"errors"
	"net"
	"net/http"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	otelprom "go.opentelemetry.io/otel/exporters/prometheus"
	"go.opentelemetry.io/otel/metric"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
)

// metricsServer serves an OpenTelemetry MeterProvider's metrics in the
// Prometheus text format on /metrics.
type metricsServer struct {
	provider *sdkmetric.MeterProvider
	lis      net.Listener
	srv      *http.Server
	served   chan error
}

// startMetrics listens on addr and serves /metrics there.
func startMetrics(addr string) (*metricsServer, error) {
	reg := prometheus.NewRegistry()
	exp, err := otelprom.New(otelprom.WithRegisterer(reg))
	if err != nil {
		return nil, err
	}
	provider := sdkmetric.NewMeterProvider(sdkmetric.WithReader(exp))
	lis, err := net.Listen("tcp", addr)
	if err != nil {
		_ = provider.Shutdown(context.Background())
		return nil, err
	}
	mux := http.NewServeMux()
	mux.Handle("/metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{}))
	m := &metricsServer{
		provider: provider,
		lis:      lis,
		srv:      &http.Server{Handler: mux, ReadHeaderTimeout: 5 * time.Second},
		served:   make(chan error, 1),
	}
	go func() { m.served <- m.srv.Serve(lis) }()
	return m, nil
}

// Provider is where sluice should send its metrics.
func (m *metricsServer) Provider() metric.MeterProvider { return m.provider }

// Addr is the address the server listens on.
func (m *metricsServer) Addr() string { return m.lis.Addr().String() }

// Close stops serving and shuts the provider down.
func (m *metricsServer) Close(ctx context.Context) error {
	err := m.srv.Shutdown(ctx)
	if serr := <-m.served; !errors.Is(serr, http.ErrServerClosed) {
		err = errors.Join(err, serr)
	}
	return errors.Join(err, m.provider.Shutdown(ctx))
}
