package outboxotel_test

import (
	"testing"

	"github.com/outboxkit/outbox/internal/pgtest"
)

func TestMain(m *testing.M) { pgtest.Main(m) }
