// Package e2e runs the example end to end: HTTP → orders (one transaction) → relay →
// NATS JetStream → inventory (the inbox) → stock, in process and as the two commands.
package e2e_test

import (
	"testing"

	"github.com/outboxkit/outbox/internal/pgtest"
)

func TestMain(m *testing.M) { pgtest.Main(m) }
