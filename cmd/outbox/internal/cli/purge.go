package cli

import (
	"context"
	"errors"
	"time"

	"github.com/spf13/cobra"

	"github.com/outboxkit/outbox"
	"github.com/outboxkit/outbox/relay"
)

// purgeOptions are the flags of `outbox purge`.
type purgeOptions struct{ olderThan time.Duration }

// Validate checks the flags.
func (o *purgeOptions) Validate() error {
	if o.olderThan <= 0 {
		return usagef("--older-than is required and must be positive, such as 168h")
	}
	return nil
}

// noSink refuses everything: the relay purge builds is never run.
type noSink struct{}

func (noSink) Publish(_ context.Context, msgs []outbox.Message) []error {
	errs := make([]error, len(msgs))
	for i := range errs {
		errs[i] = errors.New("outbox purge publishes nothing")
	}
	return errs
}

// purgeCommand is `outbox purge --older-than D`: retention now, by the library's purge.
func (a *app) purgeCommand() *cobra.Command {
	var o purgeOptions
	cmd := &cobra.Command{
		Use:   "purge",
		Short: "Remove (or archive, with retention.mode keep-then-archive) events published more than --older-than ago; dead and pending events are never purged",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := o.Validate(); err != nil {
				return err
			}
			pool, err := a.pool(cmd.Context())
			if err != nil {
				return err
			}
			defer pool.Close()
			cfg := a.cfg.Relay
			cfg.Schema, cfg.Logger = a.cfg.Schema, a.log
			cfg.Retention.Keep = o.olderThan
			if cfg.Retention.Mode == relay.DeleteOnPublish {
				cfg.Retention.Mode = relay.KeepThenDelete // nothing published is kept; purge what an earlier mode left
			}
			r, err := relay.New(pool, noSink{}, &cfg)
			if err != nil {
				return usageError{keyedRelayError(err)}
			}
			n, err := r.Purge(cmd.Context())
			if err != nil {
				return tableError("events", err)
			}
			a.printf("purged %d published event(s) older than %s (%s)\n", n, o.olderThan, cfg.Retention.Mode)
			return nil
		},
	}
	cmd.Flags().DurationVar(&o.olderThan, "older-than", 0, "purge events published more than this long ago (required), such as 168h")
	addFlags(cmd.Flags(), scopeRelay)
	return cmd
}
