package cli

import (
	"crypto/tls"
	"fmt"

	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/sasl/plain"

	"github.com/outboxkit/outbox"
	"github.com/outboxkit/outbox/sink/kafkasink"
)

// kafkaSink returns the Kafka sink (franz-go; acks=all and the sink's own producer
// settings are kafkasink's).
func (a *app) kafkaSink() (outbox.Sink, func() error, error) {
	c := a.cfg.Sink.Kafka
	if len(c.Brokers) == 0 {
		return nil, nil, usagef("sink.kafka.brokers is required with sink.type kafka")
	}
	if (c.SASLUser == "") != (c.SASLPassword == "") {
		return nil, nil, usagef("sink.kafka.sasl_user and sink.kafka.sasl_password go together")
	}
	opts := []kgo.Opt{kgo.SeedBrokers(c.Brokers...)}
	if c.TLS {
		opts = append(opts, kgo.DialTLSConfig(&tls.Config{MinVersion: tls.VersionTLS12}))
	}
	if c.SASLUser != "" {
		opts = append(opts, kgo.SASL(plain.Auth{User: c.SASLUser, Pass: c.SASLPassword}.AsMechanism()))
	}
	s, err := kafkasink.New(&kafkasink.Config{Options: opts, Topic: c.Topic, Logger: a.log})
	if err != nil {
		return nil, nil, fmt.Errorf("sink.kafka: %w", err)
	}
	return s, func() error { s.Close(); return nil }, nil
}
