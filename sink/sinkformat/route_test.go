package sinkformat_test

import (
	"errors"
	"strings"
	"testing"

	"github.com/outboxkit/outbox"
	"github.com/outboxkit/outbox/sink/sinkformat"
)

func TestRouter(t *testing.T) {
	t.Parallel()
	r, err := sinkformat.NewRouter("{{.AggregateType}}.{{.EventType}}", sinkformat.NATSSubject)
	if err != nil {
		t.Fatal(err)
	}
	m := outbox.Message{AggregateType: "order", EventType: "order.paid"}
	if got, err := r.Route(&m); got != "order.order.paid" || err != nil {
		t.Errorf("template: %q, %v", got, err)
	}
	m.Topic = "billing.invoices"
	if got, err := r.Route(&m); got != "billing.invoices" || err != nil {
		t.Errorf("topic override: %q, %v", got, err)
	}
	for _, bad := range []outbox.Message{
		{AggregateType: "order", EventType: "order paid"},
		{AggregateType: "order", EventType: "*"},
		{AggregateType: "order", EventType: "a..b"},
		{AggregateType: "order", EventType: "x", Topic: "orders.>"},
	} {
		if got, err := r.Route(&bad); !errors.Is(err, sinkformat.ErrDestination) {
			t.Errorf("%+v: routed to %q (%v), want ErrDestination", bad, got, err)
		}
	}
}

func TestRouterChecksTheTemplateAtStart(t *testing.T) {
	t.Parallel()
	for _, text := range []string{"{{.AgregateType}}", "{{.AggregateType", "{{nosuchfunc .AggregateID}}"} {
		if _, err := sinkformat.NewRouter(text, nil); err == nil {
			t.Errorf("NewRouter(%q) accepted it", text)
		}
	}
	// A header the sample lacks is not an error at start, but is for a message without it.
	r, err := sinkformat.NewRouter("tenant.{{.Headers.tenant}}", sinkformat.KafkaTopic)
	if err != nil {
		t.Fatal(err)
	}
	if got, err := r.Route(&outbox.Message{Headers: map[string]string{"tenant": "acme"}}); got != "tenant.acme" || err != nil {
		t.Errorf("with the header: %q, %v", got, err)
	}
	if got, err := r.Route(&outbox.Message{}); !errors.Is(err, sinkformat.ErrDestination) {
		t.Errorf("without the header: %q, %v, want ErrDestination", got, err)
	}
}

func TestKafkaTopic(t *testing.T) {
	t.Parallel()
	for _, ok := range []string{"outbox.event.order", "a", "A-b_c.9", strings.Repeat("x", 249)} {
		if err := sinkformat.KafkaTopic(ok); err != nil {
			t.Errorf("%q: %v", ok, err)
		}
	}
	for _, bad := range []string{"", ".", "..", "a/b", "a b", "ørder", "a:b", strings.Repeat("x", 250)} {
		if err := sinkformat.KafkaTopic(bad); err == nil {
			t.Errorf("%q accepted", bad)
		}
	}
}

func TestNATSSubject(t *testing.T) {
	t.Parallel()
	for _, ok := range []string{"orders", "outbox.event.Order", "a-b.c_d.ø"} {
		if err := sinkformat.NATSSubject(ok); err != nil {
			t.Errorf("%q: %v", ok, err)
		}
	}
	for _, bad := range []string{"", ".a", "a.", "a..b", "a.*", "a.>", "a.b*", "a b", "a\tb", "a\r\nPUB x"} {
		if err := sinkformat.NATSSubject(bad); err == nil {
			t.Errorf("%q accepted", bad)
		}
	}
}

func TestAMQPRoutingKey(t *testing.T) {
	t.Parallel()
	if err := sinkformat.AMQPRoutingKey("order.paid"); err != nil {
		t.Error(err)
	}
	for _, bad := range []string{strings.Repeat("x", 256), "a\nb"} {
		if err := sinkformat.AMQPRoutingKey(bad); err == nil {
			t.Errorf("%q accepted", bad)
		}
	}
}

// Escape is reversible on every byte and writes only what every broker takes in a token.
func TestEscape(t *testing.T) {
	t.Parallel()
	all := make([]byte, 256)
	for i := range all {
		all[i] = byte(i)
	}
	for _, s := range []string{"", "order", "o_1.x", "tenant:1/order 2", string(all), "東京🙂"} {
		e := sinkformat.Escape(s)
		if err := sinkformat.KafkaTopic("t." + e); e != "" && len(e) < 240 && err != nil {
			t.Errorf("Escape(%q) = %q is not a kafka topic part: %v", s, e, err)
		}
		if err := sinkformat.NATSSubject("t." + e); e != "" && err != nil {
			t.Errorf("Escape(%q) = %q is not a nats token: %v", s, e, err)
		}
		if back, err := sinkformat.Unescape(e); back != s || err != nil {
			t.Errorf("Unescape(Escape(%q)) = %q, %v", s, back, err)
		}
	}
	for _, bad := range []string{"a.b", "_2", "_2E", "_zz", "a b"} {
		if got, err := sinkformat.Unescape(bad); err == nil {
			t.Errorf("Unescape(%q) = %q, want an error", bad, got)
		}
	}
}

func FuzzEscape(f *testing.F) {
	f.Add("tenant:1/order 2")
	f.Fuzz(func(t *testing.T, s string) {
		e := sinkformat.Escape(s)
		if back, err := sinkformat.Unescape(e); back != s || err != nil {
			t.Fatalf("Unescape(Escape(%q)) = %q, %v", s, back, err)
		}
		if s != "" && strings.ContainsAny(e, ".*> \t\r\n") {
			t.Fatalf("Escape(%q) = %q holds a separator", s, e)
		}
	})
}

// A template that reads only the types gives the same destinations from its cache,
// and one that reads more is executed for every message.
func TestRouterCacheByType(t *testing.T) {
	t.Parallel()
	for _, text := range []string{"{{.AggregateType}}.{{escape .EventType}}", "{{.AggregateType}}.{{.AggregateID}}", `{{printf "%s" .AggregateType}}.{{.AggregateID}}`} {
		r, err := sinkformat.NewRouter(text, sinkformat.NATSSubject)
		if err != nil {
			t.Fatal(err)
		}
		for range 2 {
			for _, m := range []outbox.Message{
				{AggregateType: "order", AggregateID: "a", EventType: "paid"},
				{AggregateType: "order", AggregateID: "b", EventType: "paid"},
				{AggregateType: "order", AggregateID: "c", EventType: "x y"},
			} {
				want := strings.NewReplacer("{{.AggregateType}}", m.AggregateType, "{{escape .EventType}}", sinkformat.Escape(m.EventType),
					"{{.AggregateID}}", m.AggregateID, `{{printf "%s" .AggregateType}}`, m.AggregateType).Replace(text)
				got, err := r.Route(&m)
				if sinkformat.NATSSubject(want) != nil {
					if err == nil {
						t.Errorf("%s over %+v: %q, want refused", text, m, got)
					}
					continue
				}
				if got != want || err != nil {
					t.Errorf("%s over %+v: %q, %v; want %q", text, m, got, err, want)
				}
			}
		}
	}
}

// Execute routes by the template even when the message has a Topic, which the
// template can read.
func TestRouterExecuteIgnoresTopic(t *testing.T) {
	t.Parallel()
	r, err := sinkformat.NewRouter(`https://hooks.example.com/{{or .Topic "default"}}`, nil)
	if err != nil {
		t.Fatal(err)
	}
	for topic, want := range map[string]string{"": "https://hooks.example.com/default", "billing": "https://hooks.example.com/billing"} {
		if got, err := r.Execute(&outbox.Message{Topic: topic}); got != want || err != nil {
			t.Errorf("Topic %q: %q, %v; want %q", topic, got, err, want)
		}
	}
	strict, err := sinkformat.NewRouter("{{.AggregateType}}", sinkformat.SQSQueue)
	if err != nil {
		t.Fatal(err)
	}
	if got, err := strict.Execute(&outbox.Message{AggregateType: "a b", Topic: "ok"}); !errors.Is(err, sinkformat.ErrDestination) {
		t.Errorf("Execute checks the template's destination: %q, %v", got, err)
	}
}

func TestRedisKey(t *testing.T) {
	t.Parallel()
	for _, ok := range []string{"outbox.event.order", "a", "tenant:1/orders {x}", "ø", strings.Repeat("x", 1024)} {
		if err := sinkformat.RedisKey(ok); err != nil {
			t.Errorf("RedisKey(%q): %v", ok, err)
		}
	}
	for _, bad := range []string{"", strings.Repeat("x", 1025), "a\nb", "a\x00", "\xff"} {
		if err := sinkformat.RedisKey(bad); err == nil {
			t.Errorf("RedisKey(%q) accepted it", bad)
		}
	}
}

func TestSQSQueue(t *testing.T) {
	t.Parallel()
	for _, ok := range []string{
		"orders", "orders-1_x", "orders.fifo", strings.Repeat("q", 80), strings.Repeat("q", 75) + ".fifo",
		"https://sqs.eu-west-1.amazonaws.com/123456789012/orders.fifo", "http://127.0.0.1:4100/100010001000/orders",
	} {
		if err := sinkformat.SQSQueue(ok); err != nil {
			t.Errorf("SQSQueue(%q): %v", ok, err)
		}
	}
	for _, bad := range []string{
		"", ".fifo", "billing.invoices", "a b", strings.Repeat("q", 81), strings.Repeat("q", 76) + ".fifo",
		"https://sqs.example.com/1/", "https://sqs.example.com/1/a b", "https://sqs.example.com/1/ok\n",
	} {
		if err := sinkformat.SQSQueue(bad); err == nil {
			t.Errorf("SQSQueue(%q) accepted it", bad)
		}
	}
}
