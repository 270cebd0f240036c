package httpsink_test

import (
	"fmt"
	"log"
	"net/http"
	"time"

	"github.com/outboxkit/outbox/sink/httpsink"
)

// The signature the sink sends for a message, as the Standard Webhooks spec computes
// it (this is the spec's own example).
func ExampleSign() {
	sig, err := httpsink.Sign([]string{"whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"},
		"msg_p5jXN8AQM9LWM0D4loKWxJek", time.Unix(1614265330, 0), []byte(`{"test": 2432232314}`))
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println(sig)
	// Output: v1,g0hM9SsE+OTPJTGt/tmIKtSyZlE3uFJELVlNIOLJ1OE=
}

// A receiver checks each request before it trusts the body; a changed body, or the
// same request replayed an hour later, is refused.
func ExampleVerify() {
	const secret = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"
	body := []byte(`{"order": 42}`)
	sent := time.Now()
	sig, _ := httpsink.Sign([]string{secret}, "0190a6e2-7c3b-7d2e-9f10-3a5b6c7d8e9f", sent, body)
	header := http.Header{}
	header.Set(httpsink.HeaderID, "0190a6e2-7c3b-7d2e-9f10-3a5b6c7d8e9f")
	header.Set(httpsink.HeaderTimestamp, fmt.Sprint(sent.Unix()))
	header.Set(httpsink.HeaderSignature, sig)

	fmt.Println(httpsink.Verify(secret, header, body, 5*time.Minute))
	fmt.Println(httpsink.Verify(secret, header, []byte(`{"order": 43}`), 5*time.Minute))

	old, _ := httpsink.Sign([]string{secret}, "0190a6e2-7c3b-7d2e-9f10-3a5b6c7d8e9f", sent.Add(-time.Hour), body)
	header.Set(httpsink.HeaderTimestamp, fmt.Sprint(sent.Add(-time.Hour).Unix()))
	header.Set(httpsink.HeaderSignature, old)
	fmt.Println(httpsink.Verify(secret, header, body, 5*time.Minute) != nil)
	// Output:
	// <nil>
	// httpsink: verify: no matching webhook signature
	// true
}

// A sink POSTing each event to its type's path on one host, signed with two secrets
// while the receiver moves to the new one. Pass it to relay.New.
func Example() {
	sink, err := httpsink.New(&httpsink.Config{
		URL:          "https://hooks.example.com/outbox/{{.AggregateType}}",
		AllowedHosts: []string{"hooks.example.com"},
		Secrets:      []string{"whsec_bmV3LXNlY3JldC0yNC1ieXRlcy1sb25nISE=", "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"},
	})
	if err != nil {
		log.Fatal(err)
	}
	defer sink.Close()
	_ = sink // relay.New(pool, sink, nil)
}
