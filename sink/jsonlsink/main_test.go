package jsonlsink_test

import (
	"testing"

	"github.com/outboxkit/outbox/internal/leaktest"
)

func TestMain(m *testing.M) { leaktest.Main(m) }
