package slogdefault_test

import (
	"bytes"
	"encoding/json"
	"log/slog"
	"strings"
	"testing"

	"github.com/outboxkit/outbox/internal/slogdefault"
)

// Not parallel: it replaces the process's default logger.
func TestLoggerFollowsTheDefaultAtWarn(t *testing.T) {
	var buf bytes.Buffer
	old := slog.Default()
	t.Cleanup(func() { slog.SetDefault(old) })
	log := slogdefault.Logger().With(slog.String("relay_id", "r1")).WithGroup("g")
	// Set after the logger was made: the default is looked up at each record.
	slog.SetDefault(slog.New(slog.NewJSONHandler(&buf, &slog.HandlerOptions{Level: slog.LevelDebug})))
	log.Info("routine")
	log.Debug("detail")
	log.Warn("batch failed", slog.String("error", "boom"))
	lines := strings.Split(strings.TrimSpace(buf.String()), "\n")
	if len(lines) != 1 {
		t.Fatalf("want only the warning, got:\n%s", buf.String())
	}
	var rec map[string]any
	if err := json.Unmarshal([]byte(lines[0]), &rec); err != nil {
		t.Fatal(err)
	}
	g, _ := rec["g"].(map[string]any)
	if rec["msg"] != "batch failed" || rec["relay_id"] != "r1" || g["error"] != "boom" {
		t.Errorf("the warning lost its attributes or group: %v", rec)
	}
}
