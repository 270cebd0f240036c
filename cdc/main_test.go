package cdc

import (
	"os"
	"testing"

	"github.com/outboxkit/outbox/internal/pgtest"
)

// The tests run on a throwaway cluster of their own, which runs with wal_level=logical
// (pgtest.StartCluster), never on a shared server.
func TestMain(m *testing.M) {
	_ = os.Unsetenv("TEST_DATABASE_URL")
	pgtest.Main(m)
}
