package kafkasink_test

import (
	"encoding/json"
	"os"
	"path/filepath"
	"testing"

	"github.com/google/uuid"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/outboxkit/outbox"
	"github.com/outboxkit/outbox/sink/kafkasink"
)

// fixture is one outbox row and the record Debezium's outbox event router makes of it
// with its default settings, written from the router's documented rules.
type fixture struct {
	Rule string `json:"rule"`
	Row  struct {
		ID            string `json:"id"`
		AggregateType string `json:"aggregatetype"`
		AggregateID   string `json:"aggregateid"`
		Type          string `json:"type"`
		Payload       string `json:"payload"`
	} `json:"row"`
	Record struct {
		Topic   string            `json:"topic"`
		Key     string            `json:"key"`
		Value   string            `json:"value"`
		Headers map[string]string `json:"headers"`
	} `json:"record"`
}

// With the default Config, the records are those of Debezium's outbox event router:
// a consumer written for it reads our topics unchanged.
func TestDebeziumCompatible(t *testing.T) {
	t.Parallel()
	paths, err := filepath.Glob("testdata/debezium/*.json")
	if err != nil || len(paths) == 0 {
		t.Fatalf("no fixtures: %v", err)
	}
	seeds := newCluster(t).ListenAddrs()
	sink := newSink(t, &kafkasink.Config{Options: []kgo.Opt{kgo.SeedBrokers(seeds...), kgo.AllowAutoTopicCreation()}})
	for _, path := range paths {
		t.Run(filepath.Base(path), func(t *testing.T) {
			b, err := os.ReadFile(path)
			if err != nil {
				t.Fatal(err)
			}
			var f fixture
			if err := json.Unmarshal(b, &f); err != nil {
				t.Fatal(err)
			}
			m := outbox.Message{
				ID: uuid.MustParse(f.Row.ID), AggregateType: f.Row.AggregateType, AggregateID: f.Row.AggregateID,
				EventType: f.Row.Type, SchemaVersion: 1, ContentType: outbox.ContentTypeJSON, Payload: []byte(f.Row.Payload), Attempt: 1,
			}
			if errs := sink.Publish(t.Context(), []outbox.Message{m}); errs[0] != nil {
				t.Fatal(errs[0])
			}
			recs, err := consume(t.Context(), seeds, f.Record.Topic)
			if err != nil {
				t.Fatal(err)
			}
			if len(recs) != 1 {
				t.Fatalf("%d records in topic %q, want 1 (rule: %s)", len(recs), f.Record.Topic, f.Rule)
			}
			r := recs[0]
			if r.Topic != f.Record.Topic || string(r.Key) != f.Record.Key || string(r.Value) != f.Record.Value {
				t.Errorf("record %s key %q value %q, want %s key %q value %q (rule: %s)", r.Topic, r.Key, r.Value, f.Record.Topic, f.Record.Key, f.Record.Value, f.Rule)
			}
			for name, want := range f.Record.Headers {
				var got []string
				for _, h := range r.Headers {
					if h.Key == name {
						got = append(got, string(h.Value))
					}
				}
				if len(got) != 1 || got[0] != want {
					t.Errorf("header %s = %q, want exactly one, %q", name, got, want)
				}
			}
		})
	}
}
