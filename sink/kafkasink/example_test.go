package kafkasink_test

import (
	"crypto/tls"
	"log"

	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/sasl/plain"

	"github.com/outboxkit/outbox/sink/kafkasink"
)

// A sink with Debezium-compatible records (the default), over TLS with SASL/PLAIN.
// Pass it to relay.New.
func Example() {
	sink, err := kafkasink.New(&kafkasink.Config{
		Options: []kgo.Opt{
			kgo.SeedBrokers("kafka-1:9093", "kafka-2:9093"),
			kgo.DialTLSConfig(&tls.Config{MinVersion: tls.VersionTLS12}),
			kgo.SASL(plain.Auth{User: "relay", Pass: "secret"}.AsMechanism()),
		},
	})
	if err != nil {
		log.Fatal(err)
	}
	defer sink.Close()
	// relay.New(pool, sink, nil)
}
