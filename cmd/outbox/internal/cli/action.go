package cli

import (
	"errors"
	"fmt"
	"os"
	"strings"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/spf13/cobra"

	"github.com/outboxkit/outbox/relay"
)

type actionKind string

const (
	actionReplay  actionKind = "replay"
	actionDiscard actionKind = "discard"
)

// actionOptions are the flags of `outbox replay` and `outbox discard`.
type actionOptions struct {
	ids       []string
	aggregate string
	eventType string
	since     string
	reason    string
	actor     string
	yes       bool
}

// selection is what the flags name.
type selection struct {
	ids            []uuid.UUID
	aggType, aggID *string
	eventType      *string
	since          time.Time
}

// Validate checks the flags and returns the events they name.
func (o *actionOptions) Validate(now time.Time) (selection, error) {
	var sel selection
	if o.since != "" && o.eventType == "" {
		return sel, usagef("--since goes with --type")
	}
	ids, aggType, aggID, err := o.validateIDs()
	if err != nil {
		return sel, err
	}
	sel.ids, sel.aggType, sel.aggID = ids, aggType, aggID
	if o.eventType != "" {
		t := o.eventType
		sel.eventType = &t
		if o.since != "" {
			if d, err := time.ParseDuration(o.since); err == nil && d > 0 {
				sel.since = now.Add(-d)
			} else if ts, err := time.Parse(time.RFC3339, o.since); err == nil {
				sel.since = ts
			} else {
				return sel, usagef("--since must be a duration ago (24h) or an RFC 3339 time, got %q", o.since)
			}
		}
	}
	return sel, nil
}

func (o *actionOptions) validateIDs() (ids []uuid.UUID, aggType, aggID *string, err error) {
	if strings.TrimSpace(o.reason) == "" {
		return nil, nil, nil, usagef("--reason is required: replays and discards are audited")
	}
	if len(o.ids) == 0 && o.aggregate == "" && o.eventType == "" {
		return nil, nil, nil, usagef("name the events: --id ID (repeatable), --aggregate TYPE/ID, or --type TYPE [--since 24h]")
	}
	for _, s := range o.ids {
		id, err := uuid.Parse(s)
		if err != nil {
			return nil, nil, nil, usagef("--id %q is not a UUID", s)
		}
		ids = append(ids, id)
	}
	if o.aggregate != "" {
		t, i, ok := strings.Cut(o.aggregate, "/")
		if !ok || t == "" || i == "" {
			return nil, nil, nil, usagef("--aggregate must be TYPE/ID, got %q", o.aggregate)
		}
		aggType, aggID = &t, &i
	}
	return ids, aggType, aggID, nil
}

func defaultActor(env []string) string {
	user := cmpOr(getenv(env, "USER"), "unknown")
	host, _ := os.Hostname()
	return "outbox-cli:" + user + "@" + cmpOr(host, "unknown")
}

// selectIDsParams are select_ids.sql's: the events sel names, for a replay or not.
type selectIDsParams struct {
	IDs           []uuid.UUID `sql:"ids"`
	AggregateType *string     `sql:"aggregate_type"`
	AggregateID   *string     `sql:"aggregate_id"`
	EventType     *string     `sql:"event_type"`
	Since         time.Time   `sql:"since"`
	Replay        bool        `sql:"replay"`
}

// actionCommand is `outbox replay` or `outbox discard`.
func (a *app) actionCommand(kind actionKind) *cobra.Command {
	var o actionOptions
	short := "Make dead events pending again with a fresh attempt budget (audited in replays)"
	if kind == actionDiscard {
		short = "Give up on events that are not published, dead or pending (audited in replays): never published, they hold their aggregate no more"
	}
	cmd := &cobra.Command{
		Use:   string(kind),
		Short: short,
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			sel, err := o.Validate(time.Now())
			if err != nil {
				return err
			}
			pool, err := a.pool(cmd.Context())
			if err != nil {
				return err
			}
			defer pool.Close()
			stmt, err := bind[selectIDsParams](a, "select_ids")
			if err != nil {
				return err
			}
			p := selectIDsParams{
				IDs: sel.ids, AggregateType: sel.aggType, AggregateID: sel.aggID,
				EventType: sel.eventType, Since: sel.since, Replay: kind == actionReplay,
			}
			rows, err := pool.Query(cmd.Context(), stmt.SQL, stmt.Args(&p)...)
			if err != nil {
				return tableError("events", err)
			}
			matched, err := pgx.CollectRows(rows, pgx.RowTo[uuid.UUID])
			if err != nil {
				return tableError("events", err)
			}
			what := "dead events"
			if kind == actionDiscard {
				what = "unpublished events"
			}
			a.printf("%d %s match\n", len(matched), what)
			switch {
			case len(matched) == 0:
				return exitError{ExitFailure, fmt.Errorf("%s: no %s match: nothing done", kind, what)}
			case len(matched) > 1 && !o.yes:
				return exitError{ExitNeedsConfirmation, fmt.Errorf("%s: %d events match: add --yes to %s them all", kind, len(matched), kind)}
			}
			act := relay.Action{Schema: a.cfg.Schema, IDs: matched, Actor: cmpOr(o.actor, defaultActor(a.io.Env)), Reason: o.reason}
			var done []uuid.UUID
			if kind == actionReplay {
				done, err = relay.Replay(cmd.Context(), pool, act)
			} else {
				done, err = relay.Discard(cmd.Context(), pool, act)
			}
			if err != nil {
				if errors.Is(err, relay.ErrDiscardedEvent) {
					return exitError{ExitFailure, err}
				}
				return fmt.Errorf("table events: %w", err)
			}
			past := map[actionKind]string{actionReplay: "replayed", actionDiscard: "discarded"}[kind]
			a.printf("%s %d event(s)\n", past, len(done))
			for _, id := range done {
				a.println(id)
			}
			if len(done) < len(matched) {
				a.printf("%d event(s) changed state meanwhile and were left alone\n", len(matched)-len(done))
			}
			return nil
		},
	}
	f := cmd.Flags()
	f.StringSliceVar(&o.ids, "id", nil, "event id (repeatable, or comma-separated)")
	f.StringVar(&o.aggregate, "aggregate", "", "every matching event of one aggregate: TYPE/ID")
	f.StringVar(&o.eventType, "type", "", "every matching event of this event type")
	f.StringVar(&o.since, "since", "", "with --type: written since a duration ago (24h) or an RFC 3339 time")
	f.StringVar(&o.reason, "reason", "", "why (required; recorded in the replays table)")
	f.StringVar(&o.actor, "actor", "", "who (recorded; default outbox-cli:$USER@host)")
	f.BoolVar(&o.yes, "yes", false, "act on more than one event")
	return cmd
}
