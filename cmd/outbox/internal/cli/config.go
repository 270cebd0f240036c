package cli

import (
	"errors"
	"fmt"
	"log/slog"
	"math"
	"net/netip"
	"os"
	"slices"
	"strconv"
	"strings"
	"time"

	"gopkg.in/yaml.v3"

	"github.com/outboxkit/outbox/internal/redact"
	"github.com/outboxkit/outbox/relay"
	"github.com/outboxkit/outbox/sink/amqpsink"
	"github.com/outboxkit/outbox/sink/kafkasink"
	"github.com/outboxkit/outbox/sink/natssink"
	"github.com/outboxkit/outbox/sink/redissink"
	"github.com/outboxkit/outbox/sink/sqssink"
)

// Config is everything the outbox command can be configured with. Each field is set
// by one option of [options] (a key in the YAML file, an OUTBOX_* variable, a flag),
// and documented in docs/configuration.md.
type Config struct {
	// DatabaseURL is the PostgreSQL connection string (URL or keyword/value form).
	DatabaseURL string
	// MaxConns is the pool size.
	MaxConns int
	// Schema is the outbox schema.
	Schema string
	// LogLevel and LogFormat configure the logs on stderr.
	LogLevel  slog.Level
	LogFormat string
	// Relay is the library's relay configuration; Schema and Logger are filled from
	// the fields above.
	Relay relay.Config
	// Source is how `outbox relay` finds new events: poll (the relay's claims, woken as
	// relay.wakeup says) or cdc (the WAL, through a replication slot, with the relay's
	// polling for what it leaves).
	Source string
	// CDCSlot names the replication slot and publication of source cdc ("": the
	// library's default).
	CDCSlot string
	// TracingSpans is how a traced relay records its publishes: "message" (a span each)
	// or "call" (one send span a Publish call, linked to the producers; ADR 0028).
	TracingSpans string
	// Sink chooses and configures the sink of `outbox relay`.
	Sink SinkConfig
	// HTTPListen is the address of the metrics and health listener; "" turns it off.
	HTTPListen string
	// StallAfter is how long a backlog may go without progress before /readyz fails.
	StallAfter time.Duration
	// MetricsInterval is how often the database gauges are recomputed (at most).
	MetricsInterval time.Duration
	// Admin configures the admin API and dashboard the daemon serves on HTTPListen.
	Admin AdminConfig
	// RedactPaths are the payload fields dead show and tail never show.
	RedactPaths []redact.Path

	origin map[string]setting // key → the value as written and its source
}

// AdminConfig configures the admin API and dashboard (outboxadmin) of `outbox relay`.
type AdminConfig struct {
	// Enabled serves them under /outbox/ on http.listen.
	Enabled bool
	// Token authorises state-changing requests; required unless ReadOnly.
	Token string
	// ReadOnly refuses every state-changing request.
	ReadOnly bool
	// Operators are operators' own tokens, "name:token".
	Operators []string
	// ShowPayloads shows payloads (redact.paths redacted) and header values in the
	// admin's event detail.
	ShowPayloads bool
}

// SinkConfig configures the sink of the daemon.
type SinkConfig struct {
	// Type is jsonl, http, nats, kafka, redis, amqp or sqs.
	Type string
	// JSONLPath is the file the jsonl sink appends to; "-" is stdout.
	JSONLPath string
	// HTTP configures the webhook sink.
	HTTP HTTPSinkConfig
	// NATS configures the JetStream sink.
	NATS NATSSinkConfig
	// Kafka configures the Kafka sink.
	Kafka KafkaSinkConfig
	// Redis configures the Redis Streams sink.
	Redis RedisSinkConfig
	// AMQP configures the RabbitMQ sink.
	AMQP AMQPSinkConfig
	// SQS configures the Amazon SQS sink.
	SQS SQSSinkConfig
}

// SQSSinkConfig is the subset of sqssink.Config (and the AWS client) the daemon
// exposes. The credentials are the standard AWS chain's unless AccessKeyID and
// SecretAccessKey are set.
type SQSSinkConfig struct {
	Queue, Region, Endpoint                    string
	AccessKeyID, SecretAccessKey, SessionToken string
	MaxMessageBytes                            int
	RequestTimeout                             time.Duration
	Unbatched                                  bool
}

// KafkaSinkConfig is the subset of kafkasink.Config (and the client) the daemon exposes.
type KafkaSinkConfig struct {
	Brokers                []string
	Topic                  string
	TLS                    bool
	SASLUser, SASLPassword string
}

// RedisSinkConfig is the subset of redissink.Config (and the client) the daemon exposes.
type RedisSinkConfig struct {
	URL, Stream string
	Dedup       bool
}

// AMQPSinkConfig is the subset of amqpsink.Config the daemon exposes.
type AMQPSinkConfig struct {
	URL, Exchange, RoutingKey string
}

// NATSSinkConfig is the subset of natssink.Config (and the connection) the daemon exposes.
type NATSSinkConfig struct {
	URL, Stream, Subject string
}

// HTTPSinkConfig is the subset of httpsink.Config the daemon exposes.
type HTTPSinkConfig struct {
	URL            string
	AllowedHosts   []string
	Secrets        []string
	AllowHTTP      bool
	AllowPrivate   []netip.Prefix
	RequestTimeout time.Duration
}

// scope says which commands take an option as a flag; every command accepts every
// key in the file and the environment, so one file serves them all.
type scope int

const (
	scopeGlobal scope = iota // a flag of every command
	scopeRelay               // a flag of `outbox relay`
)

// option is one configuration key.
type option struct {
	key    string // in the YAML file, dotted: relay.batch_size
	help   string
	def    string // the default, as it would be written; "" for none
	secret bool   // never printed
	scope  scope
	set    func(c *Config, v string) error
}

// env is the option's environment variable: OUTBOX_RELAY_BATCH_SIZE.
func (o *option) env() string {
	return "OUTBOX_" + strings.ToUpper(strings.ReplaceAll(o.key, ".", "_"))
}

// flag is the option's flag name: relay-batch-size.
func (o *option) flag() string {
	return strings.NewReplacer(".", "-", "_", "-").Replace(o.key)
}

// configKey, configEnv and configFlag name the configuration file itself.
const (
	configEnv  = "OUTBOX_CONFIG"
	configFlag = "config"
)

func str(key, help, def string, field func(*Config) *string, allowed ...string) option {
	return option{key: key, help: help, def: def, set: func(c *Config, v string) error {
		if len(allowed) > 0 && !slices.Contains(allowed, v) {
			return fmt.Errorf("must be one of %s, got %q", strings.Join(allowed, ", "), v)
		}
		*field(c) = v
		return nil
	}}
}

func integer(key, help string, def int, lo, hi int, field func(*Config) *int) option {
	return option{key: key, help: help, def: strconv.Itoa(def), set: func(c *Config, v string) error {
		n, err := strconv.Atoi(strings.TrimSpace(v))
		if err != nil {
			return fmt.Errorf("must be an integer, got %q", v)
		}
		if n < lo || n > hi {
			return fmt.Errorf("must be between %d and %d, got %d", lo, hi, n)
		}
		*field(c) = n
		return nil
	}}
}

func duration(key, help string, def time.Duration, field func(*Config) *time.Duration) option {
	d := ""
	if def != 0 {
		d = def.String()
	}
	return option{key: key, help: help, def: d, set: func(c *Config, v string) error {
		n, err := time.ParseDuration(strings.TrimSpace(v))
		if err != nil {
			return fmt.Errorf("must be a duration such as 500ms, 10s or 5m, got %q", v)
		}
		if n <= 0 {
			return fmt.Errorf("must be positive, got %s", n)
		}
		*field(c) = n
		return nil
	}}
}

func boolean(key, help string, def bool, field func(*Config) *bool) option {
	return option{key: key, help: help, def: strconv.FormatBool(def), set: func(c *Config, v string) error {
		b, err := strconv.ParseBool(strings.TrimSpace(v))
		if err != nil {
			return fmt.Errorf("must be true or false, got %q", v)
		}
		*field(c) = b
		return nil
	}}
}

func list(key, help string, field func(*Config) *[]string) option {
	return option{key: key, help: help, set: func(c *Config, v string) error {
		*field(c) = splitList(v)
		return nil
	}}
}

// parseTypeWeights reads relay.type_weights: "type=weight" items, comma-separated.
func parseTypeWeights(v string) (map[string]int, error) {
	return parseTypeValues(v, "weight, a weight of 1 or more", func(s string) (int, bool) {
		n, err := strconv.Atoi(s)
		return n, err == nil && n >= 1
	})
}

// parseTypeRates reads relay.type_rates: "type=events a second" items, comma-separated.
func parseTypeRates(v string) (map[string]float64, error) {
	return parseTypeValues(v, "rate, a positive number of events a second", func(s string) (float64, bool) {
		r, err := strconv.ParseFloat(s, 64)
		return r, err == nil && r > 0 && !math.IsInf(r, 0)
	})
}

// parseTypeValues reads "type=value" items, comma-separated, each value read by parse
// (false: refused, the error says want).
func parseTypeValues[V any](v, want string, parse func(string) (V, bool)) (map[string]V, error) {
	items := splitList(v)
	if len(items) == 0 {
		return nil, nil
	}
	values := make(map[string]V, len(items))
	for _, item := range items {
		typ, s, ok := strings.Cut(item, "=")
		value, valid := parse(strings.TrimSpace(s))
		if typ = strings.TrimSpace(typ); !ok || typ == "" || !valid {
			return nil, fmt.Errorf("%q: want type=%s", item, want)
		}
		values[typ] = value
	}
	return values, nil
}

func splitList(v string) []string {
	var out []string
	for s := range strings.SplitSeq(v, ",") {
		if s = strings.TrimSpace(s); s != "" {
			out = append(out, s)
		}
	}
	return out
}

func (o option) in(s scope) option { o.scope = s; return o }

// checked returns o refusing a value check refuses (before o sets it).
func checked(o option, check func(string) error) option {
	set := o.set
	o.set = func(c *Config, v string) error {
		if err := check(v); err != nil {
			return err
		}
		return set(c, v)
	}
	return o
}

func (o option) hidden() option { o.secret = true; return o }

// options lists every configuration key, in the order docs/configuration.md lists them.
var options = []option{
	str("database.url", "PostgreSQL connection string (URL or keyword/value); its password is never printed", "",
		func(c *Config) *string { return &c.DatabaseURL }).hidden(),
	integer("database.max_conns", "connections in the pool", 8, 1, 1000, func(c *Config) *int { return &c.MaxConns }),
	str("schema", "the outbox schema", relay.DefaultSchema, func(c *Config) *string { return &c.Schema }),
	{key: "log.level", help: "debug, info, warn or error", def: "info", set: func(c *Config, v string) error {
		var l slog.Level
		if err := l.UnmarshalText([]byte(v)); err != nil || !slices.Contains([]string{"debug", "info", "warn", "error"}, strings.ToLower(v)) {
			return fmt.Errorf("must be one of debug, info, warn, error, got %q", v)
		}
		c.LogLevel = l
		return nil
	}},
	str("log.format", "text or json", "text", func(c *Config) *string { return &c.LogFormat }, "text", "json"),

	str("relay.mode", "ordered or unordered (every relay of a schema must agree)", string(relay.DefaultMode),
		func(c *Config) *string { return (*string)(&c.Relay.Mode) }, string(relay.Ordered), string(relay.Unordered)).in(scopeRelay),
	integer("relay.partitions", "relay partitions (recorded in relay_config)", relay.DefaultPartitions, 1, 4096,
		func(c *Config) *int { return &c.Relay.Partitions }).in(scopeRelay),
	integer("relay.batch_size", "most events (heads, in ordered mode) claimed by one batch", relay.DefaultBatchSize, 1, 10000,
		func(c *Config) *int { return &c.Relay.BatchSize }).in(scopeRelay),
	integer("relay.max_per_aggregate", "ordered mode: most events of one aggregate in a batch", relay.DefaultMaxPerAggregate, 1, 10000,
		func(c *Config) *int { return &c.Relay.MaxPerAggregate }).in(scopeRelay),
	integer("relay.max_batch_events", "ordered mode: most events in a batch (0: batch_size × max_per_aggregate, at most 10000)", 0, 0, 100000,
		func(c *Config) *int { return &c.Relay.MaxBatchEvents }).in(scopeRelay),
	duration("relay.batch_timeout", "time budget of one batch: claim, publish and mark", relay.DefaultBatchTimeout,
		func(c *Config) *time.Duration { return &c.Relay.BatchTimeout }).in(scopeRelay),
	duration("relay.poll_interval", "idle wait between looks for work when no listener works", relay.DefaultPollInterval,
		func(c *Config) *time.Duration { return &c.Relay.PollInterval }).in(scopeRelay),
	duration("relay.fallback_poll_interval", "idle wait between looks for work while the listener works", relay.DefaultFallbackPollInterval,
		func(c *Config) *time.Duration { return &c.Relay.FallbackPollInterval }).in(scopeRelay),
	duration("relay.claim_cooldown", "least time from a claim that caught up (found events, not a full batch) to the relay's next claim: a trickle's wake-ups gather into one claim", relay.DefaultClaimCooldown,
		func(c *Config) *time.Duration { return &c.Relay.ClaimCooldown }).in(scopeRelay),
	str("relay.source", "how new events are found: poll (claims, woken as relay.wakeup says) or cdc (logical replication; needs wal_level=logical)", "poll",
		func(c *Config) *string { return &c.Source }, "poll", "cdc").in(scopeRelay),
	str("cdc.slot", "replication slot (and publication) of relay.source cdc; \"\": outbox_cdc_<schema>", "",
		func(c *Config) *string { return &c.CDCSlot }).in(scopeRelay),
	str("tracing.spans", "with traces on (OTEL_TRACES_EXPORTER): message (a publish span each) or call (one send span a Publish call, linked to the producers' spans: about 2% of the CPU an event against 15%)", "message",
		func(c *Config) *string { return &c.TracingSpans }, "message", "call").in(scopeRelay),
	str("relay.wakeup", "listen or poll", string(relay.DefaultWakeup),
		func(c *Config) *string { return (*string)(&c.Relay.Wakeup) }, string(relay.WakeupListen), string(relay.WakeupPoll)).in(scopeRelay),
	integer("relay.concurrency", "batches in flight at once (0: the library's default)", 0, 0, 64,
		func(c *Config) *int { return &c.Relay.Concurrency }).in(scopeRelay),
	integer("relay.publish_calls", "most Publish calls one batch makes at once", relay.DefaultPublishCalls, 1, 1024,
		func(c *Config) *int { return &c.Relay.PublishCalls }).in(scopeRelay),
	duration("relay.slow_publish", "least wait for a batch's slowest Publish calls before it commits the rest", relay.DefaultSlowPublish,
		func(c *Config) *time.Duration { return &c.Relay.SlowPublish }).in(scopeRelay),
	integer("relay.breaker_min_aggregates", "distinct failing aggregates of a batch with no success that mean the sink is down", relay.DefaultBreakerMinAggregates, 1, 1000000,
		func(c *Config) *int { return &c.Relay.BreakerMinAggregates }).in(scopeRelay),
	duration("relay.breaker_initial_delay", "how long the breaker stays open before its first probe (doubling)", relay.DefaultBreakerInitialDelay,
		func(c *Config) *time.Duration { return &c.Relay.BreakerInitialDelay }).in(scopeRelay),
	duration("relay.breaker_max_delay", "cap of the breaker's wait between probes", relay.DefaultBreakerMaxDelay,
		func(c *Config) *time.Duration { return &c.Relay.BreakerMaxDelay }).in(scopeRelay),
	integer("relay.max_attempts", "attempt budget of an event failing transiently", relay.DefaultMaxAttempts, 1, 1000000,
		func(c *Config) *int { return &c.Relay.MaxAttempts }).in(scopeRelay),
	duration("relay.retry_base_delay", "backoff after the first failed attempt (doubling)", relay.DefaultRetryBaseDelay,
		func(c *Config) *time.Duration { return &c.Relay.RetryBaseDelay }).in(scopeRelay),
	duration("relay.retry_max_delay", "cap of the backoff", relay.DefaultRetryMaxDelay,
		func(c *Config) *time.Duration { return &c.Relay.RetryMaxDelay }).in(scopeRelay),
	list("relay.publish_past_dead", "aggregate types whose dead events do not hold their aggregate (comma-separated)",
		func(c *Config) *[]string { return &c.Relay.PublishPastDead }).in(scopeRelay),
	option{
		key: "relay.type_weights", help: "ordered mode: aggregate types' weights in a claim's shares of its heads, type=weight (comma-separated; types not named weigh 1)",
		set: func(c *Config, v string) error {
			weights, err := parseTypeWeights(v)
			c.Relay.TypeWeights = weights
			return err
		},
	}.in(scopeRelay),
	option{
		key: "relay.type_rates", help: "ordered mode: the most events a second of these aggregate types the schema's relays claim together, type=rate (comma-separated; types not named are not limited)",
		set: func(c *Config, v string) error {
			rates, err := parseTypeRates(v)
			c.Relay.TypeRates = rates
			return err
		},
	}.in(scopeRelay),
	list("relay.isolated_types", "ordered mode: aggregate types claimed by workers of their own, the last worker claiming the others (comma-separated; needs relay.concurrency 2 or more)",
		func(c *Config) *[]string { return &c.Relay.IsolatedTypes }).in(scopeRelay),
	boolean("relay.synchronous_commit", "batch commits wait for the WAL flush", false,
		func(c *Config) *bool { return &c.Relay.SynchronousCommit }).in(scopeRelay),
	duration("relay.shutdown_timeout", "how long in-flight batches may take to settle after SIGTERM", relay.DefaultShutdownTimeout,
		func(c *Config) *time.Duration { return &c.Relay.ShutdownTimeout }).in(scopeRelay),
	duration("relay.lease_ttl", "ordered mode: lifetime of a partition lease without renewal", relay.DefaultLeaseTTL,
		func(c *Config) *time.Duration { return &c.Relay.LeaseTTL }).in(scopeRelay),

	str("retention.mode", "keep-then-delete, delete-on-publish or keep-then-archive", string(relay.DefaultRetentionMode),
		func(c *Config) *string { return (*string)(&c.Relay.Retention.Mode) },
		string(relay.KeepThenDelete), string(relay.DeleteOnPublish), string(relay.KeepThenArchive)).in(scopeRelay),
	duration("retention.keep", "how long published events are kept", relay.DefaultRetentionKeep,
		func(c *Config) *time.Duration { return &c.Relay.Retention.Keep }).in(scopeRelay),
	duration("retention.interval", "time between purge runs", relay.DefaultRetentionInterval,
		func(c *Config) *time.Duration { return &c.Relay.Retention.Interval }).in(scopeRelay),
	integer("retention.batch_size", "seq range one purge statement covers", relay.DefaultRetentionBatchSize, 1, 100000,
		func(c *Config) *int { return &c.Relay.Retention.BatchSize }).in(scopeRelay),

	str("sink.type", "jsonl, http, nats, kafka, redis, amqp or sqs", "jsonl", func(c *Config) *string { return &c.Sink.Type },
		"jsonl", "http", "nats", "kafka", "redis", "amqp", "sqs").in(scopeRelay),
	str("sink.jsonl.path", `file the jsonl sink appends to; "-" is stdout`, "-",
		func(c *Config) *string { return &c.Sink.JSONLPath }).in(scopeRelay),
	str("sink.http.url", "URL template of the webhook sink", "", func(c *Config) *string { return &c.Sink.HTTP.URL }).in(scopeRelay),
	list("sink.http.allowed_hosts", "hosts the webhook URLs may name (comma-separated)",
		func(c *Config) *[]string { return &c.Sink.HTTP.AllowedHosts }).in(scopeRelay),
	list("sink.http.secrets", "Standard Webhooks signing secrets, whsec_… (comma-separated); never printed",
		func(c *Config) *[]string { return &c.Sink.HTTP.Secrets }).in(scopeRelay).hidden(),
	boolean("sink.http.allow_http", "permit plain http:// URLs", false,
		func(c *Config) *bool { return &c.Sink.HTTP.AllowHTTP }).in(scopeRelay),
	{
		key: "sink.http.allow_private", help: "private address ranges the webhook sink may connect to (comma-separated CIDRs)", scope: scopeRelay,
		set: func(c *Config, v string) error {
			c.Sink.HTTP.AllowPrivate = nil
			for _, s := range splitList(v) {
				p, err := netip.ParsePrefix(s)
				if err != nil {
					return fmt.Errorf("must be CIDR prefixes such as 10.0.0.0/8, got %q", s)
				}
				c.Sink.HTTP.AllowPrivate = append(c.Sink.HTTP.AllowPrivate, p)
			}
			return nil
		},
	},
	duration("sink.http.request_timeout", "bound of one webhook request", 10*time.Second,
		func(c *Config) *time.Duration { return &c.Sink.HTTP.RequestTimeout }).in(scopeRelay),

	{
		key: "redact.paths", help: "JSON paths of payload fields shown as [redacted] by dead show, tail and the admin's event detail, such as $.card.number,$.items[*].ssn (comma-separated)",
		set: func(c *Config, v string) error {
			c.RedactPaths = nil
			for _, s := range splitList(v) {
				p, err := redact.ParsePath(s)
				if err != nil {
					return err
				}
				c.RedactPaths = append(c.RedactPaths, p)
			}
			return nil
		},
	},
	str("sink.nats.url", "NATS server URL(s), comma-separated; a password in it is never printed", "nats://127.0.0.1:4222",
		func(c *Config) *string { return &c.Sink.NATS.URL }).in(scopeRelay),
	str("sink.nats.stream", "JetStream stream the subjects belong to (it must exist)", "",
		func(c *Config) *string { return &c.Sink.NATS.Stream }).in(scopeRelay),
	str("sink.nats.subject", "subject template over the event", natssink.DefaultSubject,
		func(c *Config) *string { return &c.Sink.NATS.Subject }).in(scopeRelay),
	list("sink.kafka.brokers", "seed brokers, host:port (comma-separated)",
		func(c *Config) *[]string { return &c.Sink.Kafka.Brokers }).in(scopeRelay),
	str("sink.kafka.topic", "topic template over the event", kafkasink.DefaultTopic,
		func(c *Config) *string { return &c.Sink.Kafka.Topic }).in(scopeRelay),
	boolean("sink.kafka.tls", "connect with TLS (the system's roots)", false,
		func(c *Config) *bool { return &c.Sink.Kafka.TLS }).in(scopeRelay),
	str("sink.kafka.sasl_user", "SASL/PLAIN user (with sink.kafka.sasl_password)", "",
		func(c *Config) *string { return &c.Sink.Kafka.SASLUser }).in(scopeRelay),
	str("sink.kafka.sasl_password", "SASL/PLAIN password; never printed", "",
		func(c *Config) *string { return &c.Sink.Kafka.SASLPassword }).in(scopeRelay).hidden(),
	str("sink.redis.url", "Redis URL, redis://[user:password@]host:port/db; its password is never printed", "redis://127.0.0.1:6379/0",
		func(c *Config) *string { return &c.Sink.Redis.URL }).in(scopeRelay),
	str("sink.redis.stream", "stream key template over the event", redissink.DefaultStream,
		func(c *Config) *string { return &c.Sink.Redis.Stream }).in(scopeRelay),
	boolean("sink.redis.dedup", "skip an event id the stream has seen within the dedup window", false,
		func(c *Config) *bool { return &c.Sink.Redis.Dedup }).in(scopeRelay),
	str("sink.amqp.url", "RabbitMQ URL, amqp:// or amqps://; its password is never printed", "",
		func(c *Config) *string { return &c.Sink.AMQP.URL }).in(scopeRelay),
	str("sink.amqp.exchange", `exchange to publish to (it must exist); "" is the default exchange`, "",
		func(c *Config) *string { return &c.Sink.AMQP.Exchange }).in(scopeRelay),
	str("sink.amqp.routing_key", "routing key template over the event", amqpsink.DefaultRoutingKey,
		func(c *Config) *string { return &c.Sink.AMQP.RoutingKey }).in(scopeRelay),
	checked(str("sink.sqs.queue", `queue name or URL template over the event (it must exist); a name ending in ".fifo" is a FIFO queue: message group the aggregate, deduplication id the event id`, "",
		func(c *Config) *string { return &c.Sink.SQS.Queue }), validQueue).in(scopeRelay),
	str("sink.sqs.region", "AWS region; default: the AWS configuration's (AWS_REGION, the shared config file)", "",
		func(c *Config) *string { return &c.Sink.SQS.Region }).in(scopeRelay),
	checked(str("sink.sqs.endpoint", "endpoint URL in place of AWS's, for LocalStack or goaws, such as http://127.0.0.1:4566", "",
		func(c *Config) *string { return &c.Sink.SQS.Endpoint }), validEndpoint).in(scopeRelay),
	str("sink.sqs.access_key_id", "static access key id (with sink.sqs.secret_access_key); default: the standard AWS credential chain", "",
		func(c *Config) *string { return &c.Sink.SQS.AccessKeyID }).in(scopeRelay),
	str("sink.sqs.secret_access_key", "static secret access key (with sink.sqs.access_key_id); never printed", "",
		func(c *Config) *string { return &c.Sink.SQS.SecretAccessKey }).in(scopeRelay).hidden(),
	str("sink.sqs.session_token", "session token of temporary static keys; never printed", "",
		func(c *Config) *string { return &c.Sink.SQS.SessionToken }).in(scopeRelay).hidden(),
	integer("sink.sqs.max_message_bytes", "largest message sent (body and attributes, as SQS counts); set it to the queue's MaximumMessageSize when larger", sqssink.DefaultMaxMessageBytes, 1024, 1<<20,
		func(c *Config) *int { return &c.Sink.SQS.MaxMessageBytes }).in(scopeRelay),
	duration("sink.sqs.request_timeout", "bound of one SQS call, the client's retries included", 10*time.Second,
		func(c *Config) *time.Duration { return &c.Sink.SQS.RequestTimeout }).in(scopeRelay),
	boolean("sink.sqs.unbatched", "one SendMessage call per event instead of SendMessageBatch, for a service without a usable batch call (goaws)", false,
		func(c *Config) *bool { return &c.Sink.SQS.Unbatched }).in(scopeRelay),
	str("http.listen", `address of /metrics, /healthz and /readyz; "" turns the listener off`, "127.0.0.1:9464",
		func(c *Config) *string { return &c.HTTPListen }).in(scopeRelay),
	duration("health.stall_after", "/readyz fails when a backlog has made no progress for this long", time.Minute,
		func(c *Config) *time.Duration { return &c.StallAfter }).in(scopeRelay),
	duration("metrics.interval", "how often the database gauges are recomputed, at most", 10*time.Second,
		func(c *Config) *time.Duration { return &c.MetricsInterval }).in(scopeRelay),
	boolean("admin.enabled", "serve the admin API and dashboard (outboxadmin) under /outbox/ on http.listen; reads need no token there, so keep http.listen on localhost or behind an authenticating proxy", false,
		func(c *Config) *bool { return &c.Admin.Enabled }).in(scopeRelay),
	str("admin.token", "bearer token of the admin's state-changing requests, at least 16 bytes; required unless admin.read_only; never printed", "",
		func(c *Config) *string { return &c.Admin.Token }).in(scopeRelay).hidden(),
	boolean("admin.read_only", "the admin refuses every state-changing request (no token needed)", false,
		func(c *Config) *bool { return &c.Admin.ReadOnly }).in(scopeRelay),
	boolean("admin.show_payloads", "the admin's event detail shows payloads (with redact.paths redacted) and header values", false,
		func(c *Config) *bool { return &c.Admin.ShowPayloads }).in(scopeRelay),
	list("admin.operators", "operators' own tokens, name:token (comma-separated), each at least 16 bytes: a change is audited as the operator whose token made it; never printed",
		func(c *Config) *[]string { return &c.Admin.Operators }).in(scopeRelay).hidden(),
}

func lookup(key string) *option {
	for i := range options {
		if options[i].key == key {
			return &options[i]
		}
	}
	return nil
}

// ConfigError is a configuration error: it names the key and where the value came
// from, and never the value of a secret.
type ConfigError struct {
	Source string // "config file x.yaml", "environment", "flag"
	Name   string // the key, variable or flag as the user wrote it
	Err    error
}

func (e *ConfigError) Error() string { return fmt.Sprintf("%s: %s: %v", e.Source, e.Name, e.Err) }

func (e *ConfigError) Unwrap() error { return e.Err }

// defaults returns the configuration of no file, no environment and no flags.
func defaults() Config {
	var c Config
	for _, o := range options {
		if o.def != "" {
			if err := o.apply(&c, "default", o.key, o.def); err != nil {
				panic(fmt.Sprintf("option %s: default %q: %v", o.key, o.def, err))
			}
		}
	}
	return c
}

// apply applies one value, wrapping a refusal in a ConfigError that hides a secret's
// value, and records where the value came from in c.origin.
func (o *option) apply(c *Config, source, name, v string) error {
	if err := o.set(c, v); err != nil {
		if o.secret {
			err = errors.New("invalid value (not shown: it is secret)")
		}
		return &ConfigError{Source: source, Name: name, Err: err}
	}
	if c.origin == nil {
		c.origin = map[string]setting{}
	}
	if source == "environment" || source == "flag" {
		source = name // OUTBOX_SCHEMA, --schema
	}
	c.origin[o.key] = setting{value: v, source: source}
	return nil
}

// setting is where an option's value came from.
type setting struct{ value, source string }

// loadFile applies the YAML file at path: nested mappings spell the dotted keys;
// sequences are lists. An unknown key is refused by name.
func loadFile(c *Config, path string) error {
	source := "config file " + path
	b, err := os.ReadFile(path) //nolint:gosec // G304: the operator names the file
	if err != nil {
		return &ConfigError{Source: "flag/env", Name: "config", Err: fmt.Errorf("read %s: %w", path, err)}
	}
	var doc yaml.Node
	if err := yaml.Unmarshal(b, &doc); err != nil {
		return &ConfigError{Source: source, Name: "yaml", Err: err}
	}
	if len(doc.Content) == 0 {
		return nil // empty file
	}
	return walk(c, source, "", doc.Content[0])
}

func walk(c *Config, source, prefix string, n *yaml.Node) error {
	if n.Kind != yaml.MappingNode {
		return &ConfigError{Source: source, Name: cmpOr(prefix, "top level"), Err: fmt.Errorf("line %d: expected a mapping of keys", n.Line)}
	}
	for i := 0; i+1 < len(n.Content); i += 2 {
		k, v := n.Content[i], n.Content[i+1]
		key := k.Value
		if prefix != "" {
			key = prefix + "." + key
		}
		if v.Kind == yaml.MappingNode {
			if err := walk(c, source, key, v); err != nil {
				return err
			}
			continue
		}
		o := lookup(key)
		if o == nil {
			return &ConfigError{Source: source, Name: key, Err: fmt.Errorf("line %d: unknown key (docs/configuration.md lists them)", k.Line)}
		}
		var value string
		switch v.Kind {
		case yaml.ScalarNode:
			value = v.Value
		case yaml.SequenceNode:
			items := make([]string, 0, len(v.Content))
			for _, it := range v.Content {
				if it.Kind != yaml.ScalarNode {
					return &ConfigError{Source: source, Name: key, Err: fmt.Errorf("line %d: expected a list of values", it.Line)}
				}
				items = append(items, it.Value)
			}
			value = strings.Join(items, ",")
		default:
			return &ConfigError{Source: source, Name: key, Err: fmt.Errorf("line %d: expected a value", v.Line)}
		}
		if err := o.apply(c, source, key, value); err != nil {
			return err
		}
	}
	return nil
}

// loadEnv applies the OUTBOX_* variables of env; an unknown one is refused by name
// (a typo would otherwise be ignored silently).
func loadEnv(c *Config, env []string) error {
	for _, kv := range env {
		name, value, _ := strings.Cut(kv, "=")
		if !strings.HasPrefix(name, "OUTBOX_") || name == configEnv {
			continue
		}
		var o *option
		for i := range options {
			if options[i].env() == name {
				o = &options[i]
				break
			}
		}
		if o == nil {
			return &ConfigError{Source: "environment", Name: name, Err: errors.New("unknown variable (docs/configuration.md lists them)")}
		}
		if err := o.apply(c, "environment", name, value); err != nil {
			return err
		}
	}
	return nil
}

func getenv(env []string, name string) string {
	for _, kv := range slices.Backward(env) {
		if k, v, ok := strings.Cut(kv, "="); ok && k == name {
			return v
		}
	}
	return ""
}

func cmpOr(a, b string) string {
	if a != "" {
		return a
	}
	return b
}

// secrets returns the values that must never be printed: the database password and
// the sink's secrets.
func (c *Config) secrets() []string {
	var out []string
	if pw := dsnPassword(c.DatabaseURL); pw != "" {
		out = append(out, pw)
	}
	out = append(out, c.Sink.HTTP.Secrets...)
	for _, u := range []string{c.Sink.Redis.URL, c.Sink.AMQP.URL} {
		if pw := dsnPassword(u); pw != "" {
			out = append(out, pw)
		}
	}
	for _, s := range []string{c.Sink.Kafka.SASLPassword, c.Sink.SQS.SecretAccessKey, c.Sink.SQS.SessionToken} {
		if s != "" {
			out = append(out, s)
		}
	}
	if pw := dsnPassword(c.Sink.SQS.Endpoint); pw != "" {
		out = append(out, pw)
	}
	for u := range strings.SplitSeq(c.Sink.NATS.URL, ",") {
		if pw := dsnPassword(strings.TrimSpace(u)); pw != "" {
			out = append(out, pw)
		}
	}
	return out
}
