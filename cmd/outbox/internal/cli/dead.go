package cli

import (
	"encoding/json"
	"errors"
	"fmt"
	"text/tabwriter"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/outboxkit/outbox/internal/redact"
	"github.com/spf13/cobra"
)

// DeadLetter is one line of `outbox dead list`.
type DeadLetter struct {
	ID            uuid.UUID `json:"id"`
	Seq           int64     `json:"seq"`
	AggregateType string    `json:"aggregate_type"`
	AggregateID   string    `json:"aggregate_id"`
	EventType     string    `json:"event_type"`
	Attempts      int       `json:"attempts"`
	LastError     string    `json:"last_error"`
	DeadAt        time.Time `json:"dead_at"`
}

// EventDetail is what `outbox dead show` prints.
type EventDetail struct {
	ID               uuid.UUID         `json:"id"`
	Seq              int64             `json:"seq"`
	AggregateType    string            `json:"aggregate_type"`
	AggregateID      string            `json:"aggregate_id"`
	AggregateVersion *int64            `json:"aggregate_version,omitempty"`
	Partition        int               `json:"partition"`
	EventType        string            `json:"event_type"`
	SchemaVersion    int               `json:"schema_version"`
	Topic            string            `json:"topic,omitempty"`
	Headers          map[string]string `json:"headers"`
	ContentType      string            `json:"content_type"`
	// Payload is printed only with --payload (as text: the bytes as written).
	Payload      *string    `json:"payload,omitempty"`
	TraceParent  string     `json:"trace_parent,omitempty"`
	CreatedAt    time.Time  `json:"created_at"`
	AvailableAt  time.Time  `json:"available_at"`
	Attempts     int        `json:"attempts"`
	LastError    string     `json:"last_error,omitempty"`
	PublishedAt  *time.Time `json:"published_at,omitempty"`
	DeadAt       *time.Time `json:"dead_at,omitempty"`
	DiscardedAt  *time.Time `json:"discarded_at,omitempty"`
	PayloadBytes int        `json:"payload_bytes"`
}

// deadListParams are dead_list.sql's.
type deadListParams struct {
	Limit int `sql:"limit"`
}

// deadShowParams are dead_show.sql's.
type deadShowParams struct {
	ID uuid.UUID `sql:"id"`
}

// deadCommand is `outbox dead list|show`.
func (a *app) deadCommand() *cobra.Command {
	cmd := &cobra.Command{Use: "dead", Short: "Look at dead letters: events out of attempts or failed permanently"}
	var (
		asJSON  bool
		limit   int
		payload bool
	)
	list := &cobra.Command{
		Use:   "list",
		Short: "List dead letters in write order",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if limit < 1 || limit > 100000 {
				return usagef("--limit must be between 1 and 100000, got %d", limit)
			}
			pool, err := a.pool(cmd.Context())
			if err != nil {
				return err
			}
			defer pool.Close()
			stmt, err := bind[deadListParams](a, "dead_list")
			if err != nil {
				return err
			}
			rows, err := pool.Query(cmd.Context(), stmt.SQL, stmt.Args(&deadListParams{Limit: limit})...)
			if err != nil {
				return tableError("events", err)
			}
			dead, err := pgx.CollectRows(rows, pgx.RowToStructByPos[DeadLetter])
			if err != nil {
				return tableError("events", err)
			}
			if asJSON {
				if dead == nil {
					dead = []DeadLetter{}
				}
				return json.NewEncoder(a.out).Encode(dead)
			}
			w := tabwriter.NewWriter(a.out, 0, 4, 2, ' ', 0)
			_, _ = fmt.Fprintln(w, "ID\tAGGREGATE\tEVENT TYPE\tATTEMPTS\tDEAD AT\tLAST ERROR")
			for _, d := range dead {
				_, _ = fmt.Fprintf(w, "%s\t%s/%s\t%s\t%d\t%s\t%s\n", d.ID, d.AggregateType, d.AggregateID, d.EventType, d.Attempts,
					d.DeadAt.UTC().Format(time.RFC3339), clip(d.LastError, 80))
			}
			return w.Flush()
		},
	}
	list.Flags().BoolVar(&asJSON, "json", false, "print JSON")
	list.Flags().IntVar(&limit, "limit", 100, "most dead letters listed")
	show := &cobra.Command{
		Use:   "show ID",
		Short: "Show every column of one event (the payload only with --payload)",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			id, err := uuid.Parse(args[0])
			if err != nil {
				return usagef("event id %q is not a UUID", args[0])
			}
			pool, err := a.pool(cmd.Context())
			if err != nil {
				return err
			}
			defer pool.Close()
			stmt, err := bind[deadShowParams](a, "dead_show")
			if err != nil {
				return err
			}
			var (
				d    EventDetail
				body []byte
			)
			err = pool.QueryRow(cmd.Context(), stmt.SQL, stmt.Args(&deadShowParams{ID: id})...).Scan(&d.ID, &d.Seq, &d.AggregateType, &d.AggregateID, &d.AggregateVersion,
				&d.Partition, &d.EventType, &d.SchemaVersion, &d.Topic, &d.Headers, &d.ContentType, &body, &d.TraceParent,
				&d.CreatedAt, &d.AvailableAt, &d.Attempts, &d.LastError, &d.PublishedAt, &d.DeadAt, &d.DiscardedAt)
			if errors.Is(err, pgx.ErrNoRows) {
				return exitError{ExitFailure, fmt.Errorf("table events: no event with id %s in schema %s", id, a.cfg.Schema)}
			}
			if err != nil {
				return tableError("events", err)
			}
			d.PayloadBytes = len(body)
			if payload {
				s := string(redact.Payload(body, a.cfg.RedactPaths))
				d.Payload = &s
			}
			enc := json.NewEncoder(a.out)
			enc.SetIndent("", "  ")
			return enc.Encode(d)
		},
	}
	show.Flags().BoolVar(&payload, "payload", false, "include the payload")
	cmd.AddCommand(list, show)
	return cmd
}

func clip(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n] + "…"
}
