// Package slogdefault is the logger of a library part configured without one: the
// process's slog.Default(), looked up at each record (so a later slog.SetDefault is
// honoured), passing records at Warn and above only. A relay failing every 500 ms must
// not be silent; it must not fill a service's logs with its routine either.
package slogdefault

import (
	"context"
	"log/slog"
)

// Logger returns a logger writing through slog.Default() at Warn and above.
func Logger() *slog.Logger { return slog.New(handler{}) }

// op is a WithAttrs (attrs) or WithGroup (group) applied to the handler.
type op struct {
	attrs []slog.Attr
	group string
}

// handler resolves slog.Default().Handler() at each call and replays the attributes
// and groups it was given onto it.
type handler struct{ ops []op }

func (h handler) target() slog.Handler {
	t := slog.Default().Handler()
	for _, o := range h.ops {
		if o.attrs != nil {
			t = t.WithAttrs(o.attrs)
		} else {
			t = t.WithGroup(o.group)
		}
	}
	return t
}

// Enabled implements slog.Handler: Warn and above, and what the default handler takes.
func (h handler) Enabled(ctx context.Context, l slog.Level) bool {
	return l >= slog.LevelWarn && slog.Default().Handler().Enabled(ctx, l)
}

// Handle implements slog.Handler.
func (h handler) Handle(ctx context.Context, r slog.Record) error {
	if r.Level < slog.LevelWarn {
		return nil
	}
	return h.target().Handle(ctx, r) //nolint:wrapcheck // a handler's error is the caller's
}

// WithAttrs implements slog.Handler.
func (h handler) WithAttrs(attrs []slog.Attr) slog.Handler {
	if len(attrs) == 0 {
		return h
	}
	return handler{ops: append(h.ops[:len(h.ops):len(h.ops)], op{attrs: attrs})}
}

// WithGroup implements slog.Handler.
func (h handler) WithGroup(name string) slog.Handler {
	if name == "" {
		return h
	}
	return handler{ops: append(h.ops[:len(h.ops):len(h.ops)], op{group: name})}
}
