package httpsink_test

import (
	"errors"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/outboxkit/outbox/sink/httpsink"
)

const (
	secretOld = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"
	secretNew = "whsec_bmV3LXNlY3JldC0yNC1ieXRlcy1sb25nISE="
)

// signed returns the headers of a request signed at ts with secrets.
func signed(t *testing.T, secrets []string, id string, ts time.Time, body []byte) http.Header {
	t.Helper()
	sig, err := httpsink.Sign(secrets, id, ts, body)
	if err != nil {
		t.Fatal(err)
	}
	h := http.Header{}
	h.Set(httpsink.HeaderID, id)
	h.Set(httpsink.HeaderTimestamp, fmt.Sprint(ts.Unix()))
	h.Set(httpsink.HeaderSignature, sig)
	return h
}

// The spec's published example, and one signature per secret, space-separated.
func TestSignMatchesTheSpec(t *testing.T) {
	t.Parallel()
	body := []byte(`{"test": 2432232314}`)
	got, err := httpsink.Sign([]string{secretOld, secretNew}, "msg_p5jXN8AQM9LWM0D4loKWxJek", time.Unix(1614265330, 0), body)
	if err != nil {
		t.Fatal(err)
	}
	first, second, ok := strings.Cut(got, " ")
	if !ok || first != "v1,g0hM9SsE+OTPJTGt/tmIKtSyZlE3uFJELVlNIOLJ1OE=" || !strings.HasPrefix(second, "v1,") || second == first {
		t.Fatalf("Sign = %q, want the spec's signature, then the second secret's", got)
	}
	for _, bad := range [][]string{{"whsec_not base64"}, {"whsec_c2hvcnQ="}, {}} {
		if _, err := httpsink.Sign(bad, "id", time.Now(), body); len(bad) > 0 && err == nil {
			t.Errorf("Sign with secret %q: no error", bad)
		}
	}
	if _, err := httpsink.Sign([]string{secretOld}, "a.b", time.Now(), body); err == nil {
		t.Error(`Sign with an id holding "." : no error`)
	}
}

func TestVerify(t *testing.T) {
	t.Parallel()
	body := []byte(`{"order": 42}`)
	now := time.Now()
	const id = "0190a6e2-7c3b-7d2e-9f10-3a5b6c7d8e9f"
	if err := httpsink.Verify(secretOld, signed(t, []string{secretOld}, id, now, body), body, time.Minute); err != nil {
		t.Fatalf("a good request: %v", err)
	}
	// Rotation: a request signed with both verifies with either secret.
	both := signed(t, []string{secretNew, secretOld}, id, now, body)
	for _, s := range []string{secretOld, secretNew} {
		if err := httpsink.Verify(s, both, body, time.Minute); err != nil {
			t.Errorf("rotation, verified with %s: %v", s, err)
		}
	}
	// A receiver that moved on refuses the old secret's signature alone.
	if err := httpsink.Verify(secretNew, signed(t, []string{secretOld}, id, now, body), body, time.Minute); !errors.Is(err, httpsink.ErrNoMatchingSignature) {
		t.Errorf("signed with the old secret only, verified with the new: %v", err)
	}

	tampered := func(change func(h http.Header, b []byte) []byte) (http.Header, []byte) {
		h := signed(t, []string{secretOld}, id, now, body)
		return h, change(h, append([]byte(nil), body...))
	}
	for name, c := range map[string]struct {
		change func(h http.Header, b []byte) []byte
		want   error
	}{
		"a byte of the body": {func(_ http.Header, b []byte) []byte { b[3] ^= 1; return b }, httpsink.ErrNoMatchingSignature},
		"a byte added":       {func(_ http.Header, b []byte) []byte { return append(b, ' ') }, httpsink.ErrNoMatchingSignature},
		"the id":             {func(h http.Header, b []byte) []byte { h.Set(httpsink.HeaderID, id[:35]+"0"); return b }, httpsink.ErrNoMatchingSignature},
		"the timestamp": {func(h http.Header, b []byte) []byte {
			h.Set(httpsink.HeaderTimestamp, fmt.Sprint(now.Unix()+1))
			return b
		}, httpsink.ErrNoMatchingSignature},
		"a signature byte": {func(h http.Header, b []byte) []byte {
			s := []byte(h.Get(httpsink.HeaderSignature))
			s[5] ^= 1
			h.Set(httpsink.HeaderSignature, string(s))
			return b
		}, httpsink.ErrNoMatchingSignature},
		"another version": {func(h http.Header, b []byte) []byte {
			h.Set(httpsink.HeaderSignature, strings.Replace(h.Get(httpsink.HeaderSignature), "v1,", "v2,", 1))
			return b
		}, httpsink.ErrNoMatchingSignature},
		"no signature":    {func(h http.Header, b []byte) []byte { h.Del(httpsink.HeaderSignature); return b }, httpsink.ErrMissingHeaders},
		"no id":           {func(h http.Header, b []byte) []byte { h.Del(httpsink.HeaderID); return b }, httpsink.ErrMissingHeaders},
		"a dot in the id": {func(h http.Header, b []byte) []byte { h.Set(httpsink.HeaderID, "a.b"); return b }, httpsink.ErrInvalidHeaders},
		"a dot in the time": {func(h http.Header, b []byte) []byte {
			h.Set(httpsink.HeaderTimestamp, fmt.Sprint(now.Unix())+".5")
			return b
		}, httpsink.ErrInvalidHeaders},
		"a signed timestamp": {func(h http.Header, b []byte) []byte {
			h.Set(httpsink.HeaderTimestamp, fmt.Sprint("+", now.Unix()))
			return b
		}, httpsink.ErrInvalidHeaders},
		"a timestamp not a int": {func(h http.Header, b []byte) []byte { h.Set(httpsink.HeaderTimestamp, "soon"); return b }, httpsink.ErrInvalidHeaders},
	} {
		h, b := tampered(c.change)
		if err := httpsink.Verify(secretOld, h, b, time.Minute); !errors.Is(err, c.want) {
			t.Errorf("tampered %s: %v, want %v", name, err, c.want)
		}
	}

	// A replay: the same request, correctly signed, an hour old; and one from the future.
	for _, at := range []time.Time{now.Add(-time.Hour), now.Add(-2 * time.Minute), now.Add(time.Hour)} {
		if err := httpsink.Verify(secretOld, signed(t, []string{secretOld}, id, at, body), body, time.Minute); !errors.Is(err, httpsink.ErrTimestamp) {
			t.Errorf("signed at %s from now, tolerance 1m: %v, want ErrTimestamp", at.Sub(now).Round(time.Second), err)
		}
	}
	// The default tolerance is 5 minutes.
	if err := httpsink.Verify(secretOld, signed(t, []string{secretOld}, id, now.Add(-4*time.Minute), body), body, 0); err != nil {
		t.Errorf("4 minutes old, default tolerance: %v", err)
	}
	if err := httpsink.Verify("whsec_short", signed(t, []string{secretOld}, id, now, body), body, 0); err == nil {
		t.Error("Verify with a malformed secret: no error")
	}
}
