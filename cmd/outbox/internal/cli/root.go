// Package cli is the outbox command: the relay daemon and the operator's commands,
// one file each. [Main] runs it with injected arguments, environment and writers, so
// tests run it in-process exactly as the binary does.
package cli

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"runtime/debug"
	"strings"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
)

// Exit codes of the outbox command (docs/configuration.md, "Exit codes").
const (
	// ExitOK: the command did what it was asked.
	ExitOK = 0
	// ExitFailure: the command failed at run time (database, sink, a refused operation).
	ExitFailure = 1
	// ExitUsage: bad flags, arguments or configuration; nothing was done.
	ExitUsage = 2
	// ExitNeedsConfirmation: replay or discard matched more than one event and --yes was
	// not given; nothing was done.
	ExitNeedsConfirmation = 3
	// ExitNotMigrated: `migrate status` found migrations not yet applied.
	ExitNotMigrated = 4
	// ExitPanic: a bug; the panic's message was printed (with secrets scrubbed).
	ExitPanic = 70
)

// IO is what the command reads and writes: its standard streams and environment.
type IO struct {
	In  io.Reader
	Out io.Writer
	Err io.Writer
	// Env is the environment, as os.Environ returns it.
	Env []string
}

// usageError marks an error as the user's (exit code 2).
type usageError struct{ err error }

func (e usageError) Error() string { return e.err.Error() }
func (e usageError) Unwrap() error { return e.err }

func usagef(format string, args ...any) error { return usageError{fmt.Errorf(format, args...)} }

// exitError carries a chosen exit code.
type exitError struct {
	code int
	err  error
}

func (e exitError) Error() string { return e.err.Error() }
func (e exitError) Unwrap() error { return e.err }

// app is the state shared by the subcommands of one run.
type app struct {
	io      IO
	out     io.Writer // io.Out, scrubbed
	errOut  io.Writer // io.Err, scrubbed
	scrub   *scrubber
	cfg     Config
	cfgFile string
	log     *slog.Logger
}

// Main runs the outbox command with args (without the program name) and returns its
// exit code. ctx is cancelled on SIGTERM/SIGINT by main.
func Main(ctx context.Context, args []string, streams IO) (code int) {
	a := &app{io: streams, scrub: &scrubber{}}
	a.out = scrubWriter{a.scrub, streams.Out}
	a.errOut = scrubWriter{a.scrub, streams.Err}
	defer func() {
		if p := recover(); p != nil {
			_, _ = fmt.Fprintf(a.errOut, "outbox: internal error (a bug, please report it): %v\n%s", p, debug.Stack())
			code = ExitPanic
		}
	}()
	root := a.rootCommand()
	root.SetArgs(args)
	root.SetIn(streams.In)
	root.SetOut(a.out)
	root.SetErr(a.errOut)
	err := root.ExecuteContext(ctx)
	if err == nil {
		return ExitOK
	}
	msg := strings.Join(strings.Fields(strings.ReplaceAll(err.Error(), "\n", "; ")), " ")
	_, _ = fmt.Fprintln(a.errOut, "outbox: "+msg)
	var ee exitError
	var ue usageError
	var ce *ConfigError
	switch {
	case errors.As(err, &ee):
		return ee.code
	case errors.As(err, &ue), errors.As(err, &ce):
		return ExitUsage
	case isCobraUsage(err):
		return ExitUsage
	}
	return ExitFailure
}

// isCobraUsage recognises cobra's and pflag's own usage errors, which are plain errors.
func isCobraUsage(err error) bool {
	s := err.Error()
	for _, p := range []string{"unknown flag", "unknown shorthand", "unknown command", "flag needs an argument", "invalid argument", "accepts ", "requires at least", "required flag", "bad flag syntax", "if any flags in the group"} {
		if strings.Contains(s, p) {
			return true
		}
	}
	return false
}

func (a *app) rootCommand() *cobra.Command {
	root := &cobra.Command{
		Use:           "outbox",
		Short:         "Run and operate a PostgreSQL transactional outbox",
		Long:          "outbox runs the relay daemon (outbox relay) and operates an outbox schema.\nConfiguration: flags > OUTBOX_* environment > YAML file (--config); see docs/configuration.md.",
		SilenceUsage:  true,
		SilenceErrors: true,
		PersistentPreRunE: func(cmd *cobra.Command, _ []string) error {
			return a.configure(cmd.Flags())
		},
	}
	root.SetFlagErrorFunc(func(_ *cobra.Command, err error) error { return usageError{err} })
	root.PersistentFlags().StringVar(&a.cfgFile, configFlag, "", "YAML configuration file (env "+configEnv+")")
	addFlags(root.PersistentFlags(), scopeGlobal)
	root.AddCommand(a.migrateCommand(), a.statusCommand(), a.deadCommand(),
		a.actionCommand(actionReplay), a.actionCommand(actionDiscard), a.pauseCommand(false), a.pauseCommand(true), a.relayCommand(), a.configCommand(), a.purgeCommand(), a.tailCommand(), a.demoCommand())
	return root
}

// addFlags defines the flags of the options of scope s. They are strings: each is
// parsed by its option, like a file's or the environment's value, so the three sources
// are checked alike.
func addFlags(fs *pflag.FlagSet, s scope) {
	for _, o := range options {
		if o.scope != s {
			continue
		}
		help := o.help + " (env " + o.env() + ")"
		if o.def != "" && !o.secret {
			help += " (default " + o.def + ")"
		}
		fs.String(o.flag(), "", help)
	}
}

// configure builds a.cfg: defaults, then the file, then the environment, then the flags
// that were set; and the logger.
func (a *app) configure(fs *pflag.FlagSet) error {
	cfg := defaults()
	file := a.cfgFile
	if file == "" {
		file = getenv(a.io.Env, configEnv)
	}
	if file != "" {
		if err := loadFile(&cfg, file); err != nil {
			a.scrub.add(cfg.secrets()...)
			return err
		}
	}
	if err := loadEnv(&cfg, a.io.Env); err != nil {
		a.scrub.add(cfg.secrets()...)
		return err
	}
	var err error
	fs.Visit(func(f *pflag.Flag) {
		if err != nil {
			return
		}
		for i := range options {
			if o := &options[i]; o.flag() == f.Name {
				err = o.apply(&cfg, "flag", "--"+f.Name, f.Value.String())
			}
		}
	})
	a.scrub.add(cfg.secrets()...)
	if err != nil {
		return err
	}
	a.cfg = cfg
	a.log = newLogger(a.errOut, cfg.LogLevel, cfg.LogFormat)
	return nil
}

func newLogger(w io.Writer, level slog.Level, format string) *slog.Logger {
	opts := &slog.HandlerOptions{Level: level}
	if format == "json" {
		return slog.New(slog.NewJSONHandler(w, opts))
	}
	return slog.New(slog.NewTextHandler(w, opts))
}

// pool opens a pool on database.url and checks that the database answers.
func (a *app) pool(ctx context.Context) (*pgxpool.Pool, error) {
	pool, err := a.openPool(ctx)
	if err != nil {
		return nil, err
	}
	if err := ping(ctx, pool); err != nil {
		pool.Close()
		return nil, err
	}
	return pool, nil
}

// openPool opens a pool on database.url without connecting yet.
func (a *app) openPool(ctx context.Context) (*pgxpool.Pool, error) {
	if a.cfg.DatabaseURL == "" {
		return nil, usagef("database.url is not set (flag --database-url, env OUTBOX_DATABASE_URL, or database.url in the config file)")
	}
	pc, err := pgxpool.ParseConfig(a.cfg.DatabaseURL)
	if err != nil {
		return nil, usageError{dsnError(err)}
	}
	pc.MaxConns = int32(a.cfg.MaxConns) //nolint:gosec // bounded by the option: 1..1000
	pool, err := pgxpool.NewWithConfig(ctx, pc)
	if err != nil {
		return nil, fmt.Errorf("database: %w", err)
	}
	return pool, nil
}

// ping checks that the database answers; pgx's error names host, user and database,
// never the password.
func ping(ctx context.Context, pool *pgxpool.Pool) error {
	if err := pool.Ping(ctx); err != nil {
		return fmt.Errorf("database: %w", err)
	}
	return nil
}

// printf and println write results to stdout. A failed write (a closed pipe) is not
// worth an error of its own: the command's exit code still says what happened.
func (a *app) printf(format string, args ...any) { _, _ = fmt.Fprintf(a.out, format, args...) }

func (a *app) println(args ...any) { _, _ = fmt.Fprintln(a.out, args...) }
