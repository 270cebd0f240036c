package cli

import (
	"errors"
	"fmt"
	"strings"

	"github.com/spf13/cobra"

	"github.com/outboxkit/outbox/relay"
)

// pauseOptions are the flags of `outbox pause` and `outbox resume`.
type pauseOptions struct {
	all           bool
	partition     int
	aggregateType string
	reason        string
	actor         string
}

// Validate checks the flags and returns the scope they name: exactly one of --all,
// --partition and --aggregate-type, and a reason.
func (o *pauseOptions) Validate(cmd *cobra.Command) (relay.PauseScope, error) {
	var scopes []relay.PauseScope
	if o.all {
		scopes = append(scopes, relay.PauseScope{Kind: relay.PauseAll})
	}
	if cmd.Flags().Changed("partition") {
		if o.partition < 0 {
			return relay.PauseScope{}, usagef("--partition must not be negative, got %d", o.partition)
		}
		scopes = append(scopes, relay.PauseScope{Kind: relay.PausePartition, Partition: o.partition})
	}
	if o.aggregateType != "" {
		scopes = append(scopes, relay.PauseScope{Kind: relay.PauseAggregateType, AggregateType: o.aggregateType})
	}
	if len(scopes) != 1 {
		return relay.PauseScope{}, usagef("name one scope: --all, --partition N or --aggregate-type TYPE")
	}
	if strings.TrimSpace(o.reason) == "" {
		return relay.PauseScope{}, usagef("--reason is required: pauses and resumes are audited")
	}
	return scopes[0], nil
}

// pauseCommand is `outbox pause` (resume false) or `outbox resume`.
func (a *app) pauseCommand(resume bool) *cobra.Command {
	var o pauseOptions
	use, short := "pause", "Stop every relay of the schema from publishing a scope (--all, --partition N, --aggregate-type TYPE), audited; events still queue up"
	if resume {
		use, short = "resume", "End a pause: the relays publish the scope's held events, in order"
	}
	cmd := &cobra.Command{
		Use:   use,
		Short: short,
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			scope, err := o.Validate(cmd)
			if err != nil {
				return err
			}
			pool, err := a.pool(cmd.Context())
			if err != nil {
				return err
			}
			defer pool.Close()
			req := relay.PauseRequest{Schema: a.cfg.Schema, Scope: scope, Actor: cmpOr(o.actor, defaultActor(a.io.Env)), Reason: o.reason}
			if resume {
				p, err := relay.Resume(cmd.Context(), pool, req)
				switch {
				case errors.Is(err, relay.ErrNotPaused):
					return exitError{ExitFailure, err}
				case errors.Is(err, relay.ErrNotWoken):
					a.log.Warn("the relays were not woken: they resume at their next poll", "error", err)
				case err != nil:
					return tableError("pauses", err)
				}
				a.printf("resumed %s (paused %s by %s: %s)\n", p.Scope, p.At.Format("2006-01-02 15:04:05Z07:00"), p.By, p.Reason)
				return nil
			}
			p, made, err := relay.Pause(cmd.Context(), pool, req)
			if err != nil {
				if errors.Is(err, relay.ErrNoSuchPartition) {
					detail := strings.TrimPrefix(err.Error(), fmt.Sprintf("pause: Scope.Partition %d: ", o.partition))
					return usagef("--partition %d: %s", o.partition, detail)
				}
				return tableError("pauses", err)
			}
			if !made {
				a.printf("%s was already paused, since %s by %s: %s (nothing changed)\n", p.Scope, p.At.Format("2006-01-02 15:04:05Z07:00"), p.By, p.Reason)
				return nil
			}
			a.printf("paused %s: every relay of schema %s stops claiming it now; batches in flight finish\n", p.Scope, cmpOr(a.cfg.Schema, "outbox"))
			return nil
		},
	}
	f := cmd.Flags()
	f.BoolVar(&o.all, "all", false, "every event of the schema")
	f.IntVar(&o.partition, "partition", 0, "one relay partition (outbox status lists them)")
	f.StringVar(&o.aggregateType, "aggregate-type", "", "one aggregate type")
	f.StringVar(&o.reason, "reason", "", "why (required; recorded in the pauses table)")
	f.StringVar(&o.actor, "actor", "", "who (recorded; default outbox-cli:$USER@host)")
	return cmd
}
