package cli

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"text/tabwriter"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/spf13/cobra"

	"github.com/outboxkit/outbox/relay"
)

// Status is what `outbox status` reports (its --json form).
type Status struct {
	Schema  string `json:"schema"`
	Pending int64  `json:"pending"`
	// OldestPendingSeconds is the age of the oldest pending event (0 without a backlog).
	OldestPendingSeconds float64 `json:"oldest_pending_seconds"`
	Dead                 int64   `json:"dead"`
	// BlockedAggregates counts aggregates held by a dead event (in ordered mode, unless
	// their type publishes past dead events).
	BlockedAggregates int64             `json:"blocked_aggregates"`
	Mode              string            `json:"mode,omitempty"`
	Partitions        int               `json:"partitions,omitempty"`
	EventTypes        []EventTypeStatus `json:"event_types"`
	RelayPartitions   []PartitionStatus `json:"relay_partitions"`
	// Pauses are the active pauses (outbox pause), newest first.
	Pauses []relay.Paused `json:"pauses"`
}

// EventTypeStatus is one event type's line of [Status].
type EventTypeStatus struct {
	EventType            string  `json:"event_type"`
	Pending              int64   `json:"pending"`
	OldestPendingSeconds float64 `json:"oldest_pending_seconds"`
	Dead                 int64   `json:"dead"`
}

// PartitionStatus is one relay partition with a backlog or a live lease.
type PartitionStatus struct {
	Partition            int        `json:"partition"`
	Pending              int64      `json:"pending"`
	OldestPendingSeconds float64    `json:"oldest_pending_seconds"`
	Owner                string     `json:"owner,omitempty"`
	LeaseExpiresAt       *time.Time `json:"lease_expires_at,omitempty"`
}

type statusOptions struct{ json bool }

// statusCommand is `outbox status`.
func (a *app) statusCommand() *cobra.Command {
	var o statusOptions
	cmd := &cobra.Command{
		Use:   "status",
		Short: "Show the backlog (pending, oldest pending age), dead letters, blocked aggregates, per event type and relay partition",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			pool, err := a.pool(cmd.Context())
			if err != nil {
				return err
			}
			defer pool.Close()
			st, err := a.status(cmd.Context(), pool)
			if err != nil {
				return err
			}
			if o.json {
				enc := json.NewEncoder(a.out)
				enc.SetIndent("", "  ")
				return enc.Encode(st)
			}
			a.printStatus(st)
			return nil
		},
	}
	cmd.Flags().BoolVar(&o.json, "json", false, "print JSON")
	return cmd
}

func age(now time.Time, t *time.Time) float64 {
	if t == nil {
		return 0
	}
	return max(0, now.Sub(*t).Seconds())
}

// statusPartitionsParams are status_partitions.sql's.
type statusPartitionsParams struct {
	Partitions int `sql:"partitions"` // the relays' count (relay_config)
}

// status reads the Status of the schema.
func (a *app) status(ctx context.Context, pool *pgxpool.Pool) (Status, error) {
	st := Status{Schema: a.cfg.Schema, EventTypes: []EventTypeStatus{}, RelayPartitions: []PartitionStatus{}}
	pauses, err := relay.ListPauses(ctx, pool, a.cfg.Schema, false, 0)
	if err != nil {
		return st, tableError("pauses", err)
	}
	st.Pauses = pauses
	q, err := a.coreQuery("status_summary")
	if err != nil {
		return st, err
	}
	var (
		oldest *time.Time
		now    time.Time
	)
	if err := pool.QueryRow(ctx, q).Scan(&st.Pending, &oldest, &st.Dead, &st.BlockedAggregates, &now); err != nil {
		return st, tableError("events", err)
	}
	st.OldestPendingSeconds = age(now, oldest)

	q, _ = a.query("status_types")
	rows, err := pool.Query(ctx, q)
	if err != nil {
		return st, tableError("events", err)
	}
	var t EventTypeStatus
	if _, err := pgx.ForEachRow(rows, []any{&t.EventType, &t.Pending, &t.Dead, &oldest}, func() error {
		t.OldestPendingSeconds = age(now, oldest)
		st.EventTypes = append(st.EventTypes, t)
		return nil
	}); err != nil {
		return st, tableError("events", err)
	}

	q, _ = a.query("relay_config_read")
	switch err := pool.QueryRow(ctx, q).Scan(&st.Mode, &st.Partitions); {
	case errors.Is(err, pgx.ErrNoRows):
		return st, nil // no relay ran yet: no partitions to report
	case err != nil:
		return st, tableError("relay_config", err)
	}
	parts, _ := bind[statusPartitionsParams](a, "status_partitions")
	rows, err = pool.Query(ctx, parts.SQL, parts.Args(&statusPartitionsParams{Partitions: st.Partitions})...)
	if err != nil {
		return st, tableError("leases", err)
	}
	var (
		p       PartitionStatus
		owner   *string
		expires *time.Time
	)
	if _, err := pgx.ForEachRow(rows, []any{&p.Partition, &p.Pending, &oldest, &owner, &expires}, func() error {
		p.OldestPendingSeconds = age(now, oldest)
		p.Owner, p.LeaseExpiresAt = "", expires
		if owner != nil {
			p.Owner = *owner
		}
		st.RelayPartitions = append(st.RelayPartitions, p)
		return nil
	}); err != nil {
		return st, tableError("leases", err)
	}
	return st, nil
}

// tableError names the table a query failed on, and says what to do when the schema
// was never migrated.
func tableError(table string, err error) error {
	var pe *pgconn.PgError
	if errors.As(err, &pe) && (pe.Code == "42P01" || pe.Code == "3F000") {
		return fmt.Errorf("table %s: %s (run outbox migrate)", table, pe.Message)
	}
	return fmt.Errorf("table %s: %w", table, err)
}

func (a *app) printStatus(st Status) {
	a.printf("schema %s", st.Schema)
	if st.Mode != "" {
		a.printf(" (%s, %d partitions)", st.Mode, st.Partitions)
	}
	a.printf("\npending: %d\noldest pending age: %s\ndead: %d\nblocked aggregates: %d\n",
		st.Pending, time.Duration(st.OldestPendingSeconds*float64(time.Second)).Round(time.Millisecond), st.Dead, st.BlockedAggregates)
	for _, p := range st.Pauses {
		a.printf("PAUSED %s since %s by %s: %s\n", p.Scope, p.At.Format(time.RFC3339), p.By, p.Reason)
	}
	if len(st.EventTypes) > 0 {
		a.println()
		w := tabwriter.NewWriter(a.out, 0, 4, 2, ' ', 0)
		_, _ = fmt.Fprintln(w, "EVENT TYPE\tPENDING\tOLDEST\tDEAD")
		for _, t := range st.EventTypes {
			_, _ = fmt.Fprintf(w, "%s\t%d\t%s\t%d\n", t.EventType, t.Pending, time.Duration(t.OldestPendingSeconds*float64(time.Second)).Round(time.Millisecond), t.Dead)
		}
		_ = w.Flush()
	}
	if len(st.RelayPartitions) > 0 {
		a.println()
		w := tabwriter.NewWriter(a.out, 0, 4, 2, ' ', 0)
		_, _ = fmt.Fprintln(w, "PARTITION\tPENDING\tOLDEST\tLEASE OWNER")
		for _, p := range st.RelayPartitions {
			_, _ = fmt.Fprintf(w, "%d\t%d\t%s\t%s\n", p.Partition, p.Pending, time.Duration(p.OldestPendingSeconds*float64(time.Second)).Round(time.Millisecond), cmpOr(p.Owner, "-"))
		}
		_ = w.Flush()
	}
}
