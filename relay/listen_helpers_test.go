package relay_test

import "github.com/outboxkit/outbox/relay"

// manualListener returns cfg for a relay whose wake-up listener a test starts itself
// (relay.StartListener): the relay's own is off, so it cannot blur what woke the relay.
func manualListener(cfg *relay.Config) *relay.Config {
	cfg.Wakeup = relay.WakeupPoll
	return cfg
}
