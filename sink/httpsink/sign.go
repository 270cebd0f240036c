package httpsink

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"time"
)

// The Standard Webhooks headers every request carries.
const (
	// HeaderID is the event id: the same on every attempt, the key a receiver
	// deduplicates by.
	HeaderID = "webhook-id"
	// HeaderTimestamp is the time of the attempt in Unix seconds, signed with the id
	// and the body.
	HeaderTimestamp = "webhook-timestamp"
	// HeaderSignature holds "v1,<base64 HMAC-SHA256>" for each signing secret,
	// separated by spaces.
	HeaderSignature = "webhook-signature"
)

// SecretPrefix starts a Standard Webhooks secret: "whsec_" and the key in base64.
const SecretPrefix = "whsec_"

// DefaultTolerance is the tolerance of [Verify] given none: how far a request's
// timestamp may be from the receiver's clock.
const DefaultTolerance = 5 * time.Minute

// Errors of [Verify]; every error it returns wraps one of them.
var (
	// ErrMissingHeaders: a webhook header is missing or empty.
	ErrMissingHeaders = errors.New("webhook headers missing")
	// ErrInvalidHeaders: the id holds a "." or the timestamp is not Unix seconds.
	ErrInvalidHeaders = errors.New("webhook headers invalid")
	// ErrTimestamp: the timestamp is outside the tolerance — too old (a replay) or
	// too far ahead.
	ErrTimestamp = errors.New("webhook timestamp outside the tolerance")
	// ErrNoMatchingSignature: no v1 signature matches the secret, id, timestamp and
	// body.
	ErrNoMatchingSignature = errors.New("no matching webhook signature")
)

// parseSecret decodes a "whsec_" secret (the prefix is optional) into its key: 24 to
// 64 bytes, as the Standard Webhooks spec asks.
func parseSecret(secret string) ([]byte, error) {
	key, err := base64.StdEncoding.DecodeString(strings.TrimPrefix(secret, SecretPrefix))
	if err != nil {
		return nil, fmt.Errorf("secret is not %s and base64: %w", SecretPrefix, err)
	}
	if len(key) < 24 || len(key) > 64 {
		return nil, fmt.Errorf("secret key is %d bytes, want 24 to 64", len(key))
	}
	return key, nil
}

// signature returns the base64 HMAC-SHA256 with key of "id.timestamp.body".
func signature(key []byte, id string, unix int64, body []byte) []byte {
	mac := hmac.New(sha256.New, key)
	mac.Write([]byte(id))
	mac.Write([]byte{'.'})
	mac.Write(strconv.AppendInt(nil, unix, 10))
	mac.Write([]byte{'.'})
	mac.Write(body)
	sum := mac.Sum(nil)
	out := make([]byte, base64.StdEncoding.EncodedLen(len(sum)))
	base64.StdEncoding.Encode(out, sum)
	return out
}

// signatureHeader is the webhook-signature value for keys.
func signatureHeader(keys [][]byte, id string, unix int64, body []byte) string {
	var b strings.Builder
	for i, key := range keys {
		if i > 0 {
			b.WriteByte(' ')
		}
		b.WriteString("v1,")
		b.Write(signature(key, id, unix, body))
	}
	return b.String()
}

// Sign returns the webhook-signature header value of a request with id, timestamp
// and body: "v1,<signature>" for each of secrets, separated by spaces, the signature
// being the base64 HMAC-SHA256 of "id.timestamp.body" (timestamp in Unix seconds)
// with the secret's key. It is what the sink sends; a receiver checks it with
// [Verify].
func Sign(secrets []string, id string, timestamp time.Time, body []byte) (string, error) {
	keys := make([][]byte, len(secrets))
	for i, s := range secrets {
		key, err := parseSecret(s)
		if err != nil {
			return "", fmt.Errorf("httpsink: secret %d: %w", i, err)
		}
		keys[i] = key
	}
	if strings.Contains(id, ".") {
		return "", fmt.Errorf("httpsink: id %q holds a \".\"", id)
	}
	return signatureHeader(keys, id, timestamp.Unix(), body), nil
}

// Verify checks a webhook request for a receiver: header holds the webhook-id,
// webhook-timestamp and webhook-signature headers, body the exact bytes received. It
// accepts the request when one of its v1 signatures matches secret (compared in
// constant time; during a rotation the sender signs with the old and the new secret,
// and either verifies) and its timestamp is within tolerance of the receiver's clock
// (DefaultTolerance when tolerance is 0 or less): an old request replayed later is
// refused. Within the tolerance a replay passes: deduplicate by webhook-id, the event
// id, as an inbox does. The error wraps one of the Err values above.
func Verify(secret string, header http.Header, body []byte, tolerance time.Duration) error {
	key, err := parseSecret(secret)
	if err != nil {
		return fmt.Errorf("httpsink: verify: %w", err)
	}
	id, ts, sigs := header.Get(HeaderID), header.Get(HeaderTimestamp), header.Get(HeaderSignature)
	if id == "" || ts == "" || sigs == "" {
		return fmt.Errorf("httpsink: verify: %w: want %s, %s and %s", ErrMissingHeaders, HeaderID, HeaderTimestamp, HeaderSignature)
	}
	if strings.Contains(id, ".") {
		return fmt.Errorf("httpsink: verify: %w: %s holds a \".\"", ErrInvalidHeaders, HeaderID)
	}
	unix, err := strconv.ParseInt(ts, 10, 64)
	if err != nil || ts[0] == '+' || ts[0] == '-' {
		return fmt.Errorf("httpsink: verify: %w: %s %q is not Unix seconds", ErrInvalidHeaders, HeaderTimestamp, ts)
	}
	if tolerance <= 0 {
		tolerance = DefaultTolerance
	}
	now := time.Now().Unix()
	if off := now - unix; off > int64(tolerance/time.Second) || -off > int64(tolerance/time.Second) {
		return fmt.Errorf("httpsink: verify: %w: %ds from now, tolerance %s", ErrTimestamp, -off, tolerance)
	}
	want := signature(key, id, unix, body)
	matched := false
	for _, s := range strings.Fields(sigs) {
		version, sig, ok := strings.Cut(s, ",")
		if ok && version == "v1" && hmac.Equal([]byte(sig), want) {
			matched = true // keep going: the time taken does not tell which one matched
		}
	}
	if !matched {
		return fmt.Errorf("httpsink: verify: %w", ErrNoMatchingSignature)
	}
	return nil
}
