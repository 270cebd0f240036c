module github.com/outboxkit/outbox/bench

go 1.26.0

replace github.com/outboxkit/outbox => ../

replace github.com/outboxkit/outbox/outboxotel => ../outboxotel

replace github.com/outboxkit/outbox/outboxprom => ../outboxprom

require (
	github.com/Admiral-Piett/goaws v0.5.4
	github.com/ThreeDotsLabs/watermill v1.5.1
	github.com/ThreeDotsLabs/watermill-sql/v4 v4.1.2
	github.com/aws/aws-sdk-go-v2 v1.48.0
	github.com/aws/aws-sdk-go-v2/service/sqs v1.53.0
	github.com/google/uuid v1.6.0
	github.com/jackc/pgx/v5 v5.12.0
	github.com/nats-io/nats.go v1.55.0
	github.com/outboxkit/outbox v0.0.0-00010101000000-000000000000
	github.com/outboxkit/outbox/outboxotel v0.0.0-00010101000000-000000000000
	github.com/outboxkit/outbox/outboxprom v0.0.0-00010101000000-000000000000
	github.com/outboxkit/outbox/sink/amqpsink v0.0.0-00010101000000-000000000000
	github.com/outboxkit/outbox/sink/kafkasink v0.0.0-00010101000000-000000000000
	github.com/outboxkit/outbox/sink/natssink v0.0.0-00010101000000-000000000000
	github.com/outboxkit/outbox/sink/redissink v0.0.0-00010101000000-000000000000
	github.com/outboxkit/outbox/sink/sqssink v0.0.0-00010101000000-000000000000
	github.com/prometheus/client_golang v1.24.1
	github.com/rabbitmq/amqp091-go v1.16.0
	github.com/redis/go-redis/v9 v9.23.0
	github.com/riverqueue/river v0.51.2
	github.com/riverqueue/river/riverdriver/riverpgxv5 v0.51.2
	github.com/sirupsen/logrus v1.9.0
	github.com/twmb/franz-go v1.22.3
	github.com/twmb/franz-go/pkg/kfake v0.0.0-20260918054303-01f206a7e32c
	go.opentelemetry.io/otel/sdk v1.47.0
	golang.org/x/sync v0.24.0
)

require (
	github.com/aws/aws-sdk-go-v2/internal/configsources v1.5.12 // indirect
	github.com/aws/aws-sdk-go-v2/internal/endpoints/v2 v2.8.12 // indirect
	github.com/aws/smithy-go v1.28.9 // indirect
	github.com/beorn7/perks v1.0.1 // indirect
	github.com/cenkalti/backoff/v5 v5.0.3 // indirect
	github.com/cespare/xxhash/v2 v2.3.0 // indirect
	github.com/go-logr/logr v1.4.4 // indirect
	github.com/go-logr/stdr v1.2.2 // indirect
	github.com/gorilla/mux v1.8.1 // indirect
	github.com/gorilla/schema v1.4.1 // indirect
	github.com/jackc/pgio v1.0.0 // indirect
	github.com/jackc/pglogrepl v0.0.0-20251213150135-2e8d0df862c1 // indirect
	github.com/jackc/pgpassfile v1.0.0 // indirect
	github.com/jackc/pgservicefile v0.0.0-20240606120523-5a60cdf6a761 // indirect
	github.com/jackc/puddle/v2 v2.2.3 // indirect
	github.com/klauspost/compress v1.20.3 // indirect
	github.com/lib/pq v1.10.9 // indirect
	github.com/lithammer/shortuuid/v3 v3.0.7 // indirect
	github.com/mitchellh/copystructure v1.2.0 // indirect
	github.com/mitchellh/reflectwalk v1.0.2 // indirect
	github.com/munnerz/goautoneg v0.0.0-20191010083416-a7dc8b61c822 // indirect
	github.com/nats-io/nkeys v0.4.16 // indirect
	github.com/nats-io/nuid v1.0.1 // indirect
	github.com/oklog/ulid v1.3.1 // indirect
	github.com/pierrec/lz4/v4 v4.1.33 // indirect
	github.com/pkg/errors v0.9.1 // indirect
	github.com/prometheus/client_model v0.6.2 // indirect
	github.com/prometheus/common v0.70.1 // indirect
	github.com/prometheus/procfs v0.21.1 // indirect
	github.com/riverqueue/river/riverdriver v0.51.2 // indirect
	github.com/riverqueue/river/rivershared v0.51.2 // indirect
	github.com/riverqueue/river/rivertype v0.51.2 // indirect
	github.com/sony/gobreaker v1.0.0 // indirect
	github.com/tidwall/gjson v1.20.0 // indirect
	github.com/tidwall/match v1.2.0 // indirect
	github.com/tidwall/pretty v1.2.1 // indirect
	github.com/tidwall/sjson v1.2.5 // indirect
	github.com/twmb/franz-go/pkg/kmsg v1.15.1 // indirect
	go.opentelemetry.io/auto/sdk v1.2.1 // indirect
	go.opentelemetry.io/otel v1.47.0 // indirect
	go.opentelemetry.io/otel/log v1.47.0 // indirect
	go.opentelemetry.io/otel/metric v1.47.0 // indirect
	go.opentelemetry.io/otel/trace v1.47.0 // indirect
	go.uber.org/atomic v1.12.0 // indirect
	golang.org/x/crypto v0.58.0 // indirect
	golang.org/x/sys v0.49.0 // indirect
	golang.org/x/text v0.43.0 // indirect
	google.golang.org/protobuf v1.36.11 // indirect
)

replace (
	github.com/outboxkit/outbox/sink/amqpsink => ../sink/amqpsink
	github.com/outboxkit/outbox/sink/kafkasink => ../sink/kafkasink
	github.com/outboxkit/outbox/sink/natssink => ../sink/natssink
	github.com/outboxkit/outbox/sink/redissink => ../sink/redissink
	github.com/outboxkit/outbox/sink/sqssink => ../sink/sqssink
)

require github.com/outboxkit/outbox/cdc v0.0.0-00010101000000-000000000000

replace github.com/outboxkit/outbox/cdc => ../cdc
