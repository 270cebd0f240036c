package outboxadmin

import (
	"cmp"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/outboxkit/outbox/internal/sqlq"
)

// Options configure a [Handler]. Zero fields mean the defaults given at each field.
type Options struct {
	// Pool is the database holding the outbox schema. Required.
	Pool *pgxpool.Pool
	// Schema holding the outbox tables. Default "outbox".
	Schema string
	// Token authorises every state-changing request: sent as "Authorization: Bearer
	// <token>" to the API, typed into the dashboard's token field. Required unless
	// ReadOnly; at least [MinTokenLength] bytes.
	Token string
	// Operators gives operators tokens of their own (name → token, each at least
	// [MinTokenLength] bytes, all distinct): a change authenticated by an operator's token
	// is recorded with the operator's name as its actor, whatever actor the request
	// names, so the audit says who, not who they said they were. With Operators, Token
	// may be empty (only named tokens are accepted).
	Operators map[string]string
	// ReadOnly refuses every state-changing request with 403. Default false.
	ReadOnly bool
	// ShowPayloads shows event payloads and header values in the event detail (API and
	// page). Default false: their sizes and header names only, since payloads may hold
	// personal data.
	ShowPayloads bool
	// RedactPaths are JSON paths of payload fields shown as "[redacted]" when
	// ShowPayloads is on: $.card.number, $.items[*].ssn, $.contacts[0].phone (the
	// same paths, and the same redaction, as the outbox command's redact.paths). A
	// payload that is not JSON is withheld whole when any path is set.
	RedactPaths []string
	// PathPrefix is where the handler is mounted: it serves PathPrefix (the dashboard),
	// PathPrefix+"api/…" and the rest. It must start and end with "/". Default "/".
	PathPrefix string
	// MaxBodyBytes bounds a request body; a larger one is refused with 413. Default
	// [DefaultMaxBodyBytes] (64 KiB).
	MaxBodyBytes int64
	// PageSize is the number of rows a list returns when the request names no limit.
	// Default [DefaultPageSize] (100).
	PageSize int
	// MaxPageSize is the largest limit a list request may ask for. Default
	// [DefaultMaxPageSize] (1000).
	MaxPageSize int
	// MaxBulk is the most events one replay or discard may change; a filter matching
	// more is refused with 409 and nothing changes (narrow the filter). Default
	// [DefaultMaxBulk] (10000).
	MaxBulk int
	// RateLimit is how many state-changing requests (and refused credentials) per second
	// the handler accepts, over all clients, with bursts of RateBurst; more are refused
	// with 429. Default [DefaultRateLimit] (5).
	RateLimit float64
	// RateBurst: default [DefaultRateBurst] (20).
	RateBurst int
	// Refresh is how often the dashboard's overview pages reload themselves. Default
	// [DefaultRefresh] (5s).
	Refresh time.Duration
	// QueryTimeout bounds each request's database work. Default [DefaultQueryTimeout] (10s).
	QueryTimeout time.Duration
	// Logger receives one line per replay or discard and per internal error. Default: discard.
	Logger *slog.Logger
}

// The defaults of [Options], each described at its field.
const (
	DefaultMaxBodyBytes = 64 << 10
	DefaultPageSize     = 100
	DefaultMaxPageSize  = 1000
	DefaultMaxBulk      = 10000
	DefaultRateLimit    = 5
	DefaultRateBurst    = 20
	DefaultRefresh      = 5 * time.Second
	DefaultQueryTimeout = 10 * time.Second
	// MinTokenLength is the shortest Token accepted.
	MinTokenLength = 16
)

// withDefaults returns o with its defaults filled in, validated, and the quoted schema.
func (o Options) withDefaults() (Options, string, error) {
	o.Schema = cmp.Or(o.Schema, sqlq.DefaultSchema)
	o.PathPrefix = cmp.Or(o.PathPrefix, "/")
	o.MaxBodyBytes = cmp.Or(o.MaxBodyBytes, DefaultMaxBodyBytes)
	o.PageSize = cmp.Or(o.PageSize, DefaultPageSize)
	o.MaxPageSize = cmp.Or(o.MaxPageSize, DefaultMaxPageSize)
	o.MaxBulk = cmp.Or(o.MaxBulk, DefaultMaxBulk)
	o.RateLimit = cmp.Or(o.RateLimit, DefaultRateLimit)
	o.RateBurst = cmp.Or(o.RateBurst, DefaultRateBurst)
	o.Refresh = cmp.Or(o.Refresh, DefaultRefresh)
	o.QueryTimeout = cmp.Or(o.QueryTimeout, DefaultQueryTimeout)
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
	quoted, err := sqlq.QuoteSchema(o.Schema)
	if err != nil {
		return o, "", fmt.Errorf("Schema: %w", err)
	}
	switch {
	case o.Pool == nil:
		return o, "", errors.New("Pool is required")
	case !o.ReadOnly && len(o.Operators) == 0 && len(o.Token) < MinTokenLength:
		return o, "", fmt.Errorf("Token must be at least %d bytes unless ReadOnly or Operators are set (state-changing requests are refused without it)", MinTokenLength)
	case o.Token != "" && len(o.Token) < MinTokenLength:
		return o, "", fmt.Errorf("Token must be at least %d bytes", MinTokenLength)
	case !strings.HasPrefix(o.PathPrefix, "/") || !strings.HasSuffix(o.PathPrefix, "/"):
		return o, "", fmt.Errorf("PathPrefix %q must start and end with /", o.PathPrefix)
	case o.MaxBodyBytes < 1024:
		return o, "", errors.New("MaxBodyBytes must be at least 1024")
	case o.PageSize < 1 || o.PageSize > o.MaxPageSize:
		return o, "", errors.New("PageSize must be between 1 and MaxPageSize")
	case o.MaxBulk < 1:
		return o, "", errors.New("MaxBulk must be at least 1")
	case o.RateLimit <= 0 || o.RateBurst < 1:
		return o, "", errors.New("RateLimit must be positive and RateBurst at least 1")
	}
	seen := map[string]string{o.Token: "Token"}
	for name, tok := range o.Operators {
		switch {
		case strings.TrimSpace(name) == "" || len(name) > 200:
			return o, "", errors.New("Operators: a name must be 1-200 bytes")
		case len(tok) < MinTokenLength:
			return o, "", fmt.Errorf("Operators[%q]: the token must be at least %d bytes", name, MinTokenLength)
		case seen[tok] != "":
			return o, "", fmt.Errorf("Operators[%q]: the token is also %s's: every token must be distinct", name, seen[tok])
		}
		seen[tok] = fmt.Sprintf("Operators[%q]", name)
	}
	return o, quoted, nil
}
