package outboxprom_test

import (
	"context"
	"log"
	"net/http"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/outboxkit/outbox"
	"github.com/outboxkit/outbox/outboxprom"
	"github.com/outboxkit/outbox/relay"
)

// A service that runs the relay in-process exports its metrics on its own /metrics.
func Example() {
	ctx := context.Background()
	pool, err := pgxpool.New(ctx, "postgres://localhost/app")
	if err != nil {
		log.Fatal(err)
	}
	var sink outbox.Sink // the service's broker sink

	m := outboxprom.New(pool, nil)
	r, err := relay.New(pool, sink, &relay.Config{Observer: m})
	if err != nil {
		log.Fatal(err)
	}
	m.Watch(r)
	reg := prometheus.NewRegistry()
	reg.MustRegister(m)
	go m.Run(ctx)
	http.Handle("/metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{}))
	go func() { log.Print(r.Run(ctx)) }()
}
