package cdc

import (
	"os"
	"testing"

	"github.com/outboxkit/outbox/internal/pgtest"
)

// The tests run on a throwaway cluster of their own, which runs with wal_level=logical
// (pgtest.StartCluster), never on a shared server. Run as a child of the kill storm
// (stormDSNEnv set), the binary runs a relay and its Source until it is killed.
func TestMain(m *testing.M) {
	if os.Getenv(stormDSNEnv) != "" {
		os.Exit(stormChild())
	}
	_ = os.Unsetenv("TEST_DATABASE_URL")
	pgtest.Main(m)
}
