package redact

import (
	"strings"
	"testing"
)

func TestPayload(t *testing.T) {
	t.Parallel()
	var paths []Path
	for _, s := range []string{"$.card.number", "$.items[*].ssn", "$.contacts[1].phone", "$.absent.field", "$.list[*]"} {
		p, err := ParsePath(s)
		if err != nil {
			t.Fatal(err)
		}
		if p.String() != s {
			t.Errorf("ParsePath(%q).String() = %q", s, p.String())
		}
		paths = append(paths, p)
	}
	in := `{"card":{"number":"4111-PII","brand":"visa"},"items":[{"ssn":"PII-1","n":1},{"ssn":"PII-2"}],` +
		`"contacts":[{"phone":"keep-0"},{"phone":"PII-3"}],"list":["PII-4",5],"amount":12.50}`
	got := string(Payload([]byte(in), paths))
	if strings.Contains(got, "PII") {
		t.Errorf("a sensitive value survived: %s", got)
	}
	for _, keep := range []string{`"brand":"visa"`, `"n":1`, `"keep-0"`, `"amount":12.50`} {
		if !strings.Contains(got, keep) {
			t.Errorf("redaction lost %s: %s", keep, got)
		}
	}
	if got := string(Payload([]byte("\x00binary PII"), paths)); strings.Contains(got, "PII") {
		t.Errorf("a non-JSON payload was shown with paths configured: %s", got)
	}
	if got := string(Payload([]byte(in), nil)); got != in {
		t.Errorf("without paths the payload must be as written: %s", got)
	}
	for _, bad := range []string{"card.number", "$", "$..x", "$.a[x]", "$.a[1"} {
		if _, err := ParsePath(bad); err == nil {
			t.Errorf("ParsePath(%q) accepted", bad)
		}
	}
}
