package cli

import (
	"encoding/json"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/outboxkit/outbox/internal/redact"
	"github.com/spf13/cobra"
)

// tailOptions are the flags of `outbox tail`.
type tailOptions struct {
	fromSeq  int64
	count    int
	interval time.Duration
	payload  bool
}

// Validate checks the flags.
func (o *tailOptions) Validate() error {
	switch {
	case o.count < 0:
		return usagef("--count must not be negative, got %d", o.count)
	case o.interval <= 0:
		return usagef("--interval must be positive, got %s", o.interval)
	case o.fromSeq < -1:
		return usagef("--from-seq must be -1 (now) or a seq, got %d", o.fromSeq)
	}
	return nil
}

// TailLine is one line of `outbox tail`.
type TailLine struct {
	ID            uuid.UUID       `json:"id"`
	Seq           int64           `json:"seq"`
	AggregateType string          `json:"aggregate_type"`
	AggregateID   string          `json:"aggregate_id"`
	EventType     string          `json:"event_type"`
	CreatedAt     time.Time       `json:"created_at"`
	State         string          `json:"state"`
	Payload       json.RawMessage `json:"payload,omitempty"`
}

// tailParams are tail.sql's.
type tailParams struct {
	After       int64 `sql:"after"` // the last seq shown
	WithPayload bool  `sql:"with_payload"`
}

// tailCommand is `outbox tail`: follow new events, for debugging.
func (a *app) tailCommand() *cobra.Command {
	o := tailOptions{fromSeq: -1, interval: 500 * time.Millisecond}
	cmd := &cobra.Command{
		Use:   "tail",
		Short: "Follow new events as JSON lines, for debugging (by seq: a row committing late with a lower seq is not shown)",
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
			stmt, err := bind[tailParams](a, "tail")
			if err != nil {
				return err
			}
			ctx := cmd.Context()
			after := o.fromSeq
			if after < 0 {
				qs, _ := a.query("tail_start")
				if err := pool.QueryRow(ctx, qs).Scan(&after); err != nil {
					return tableError("events", err)
				}
			}
			enc := json.NewEncoder(a.out)
			shown := 0
			tick := time.NewTicker(o.interval)
			defer tick.Stop()
			for {
				rows, err := pool.Query(ctx, stmt.SQL, stmt.Args(&tailParams{After: after, WithPayload: o.payload})...)
				if err != nil {
					if ctx.Err() != nil {
						return nil
					}
					return tableError("events", err)
				}
				lines, err := pgx.CollectRows(rows, pgx.RowToStructByPos[TailLine])
				if err != nil {
					if ctx.Err() != nil {
						return nil
					}
					return tableError("events", err)
				}
				for _, l := range lines {
					if l.Payload != nil {
						l.Payload = redact.Payload(l.Payload, a.cfg.RedactPaths)
					}
					if err := enc.Encode(l); err != nil {
						return err
					}
					after = l.Seq
					if shown++; o.count > 0 && shown >= o.count {
						return nil
					}
				}
				if len(lines) > 0 {
					continue // more may be waiting
				}
				select {
				case <-ctx.Done():
					return nil
				case <-tick.C:
				}
			}
		},
	}
	f := cmd.Flags()
	f.Int64Var(&o.fromSeq, "from-seq", -1, "show events after this seq (-1: only those written from now on; 0: all)")
	f.IntVar(&o.count, "count", 0, "stop after this many events (0: follow until interrupted)")
	f.DurationVar(&o.interval, "interval", o.interval, "how often to look for new events")
	f.BoolVar(&o.payload, "payload", false, "include JSON payloads")
	return cmd
}
