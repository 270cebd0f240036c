package orders_test

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/outboxkit/outbox/examples/orders/orders"
)

func post(t *testing.T, url, body string) (int, map[string]string, http.Header) {
	t.Helper()
	resp, err := http.Post(url+"/orders", "application/json", strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var out map[string]string
	if err := json.NewDecoder(resp.Body).Decode(&out); err != nil {
		t.Fatalf("POST %s: decode the answer: %v", body, err)
	}
	return resp.StatusCode, out, resp.Header
}

// A bad request is answered 400 with the field named, and writes nothing: no order, no
// event.
func TestBadRequestNamesTheFieldAndWritesNothing(t *testing.T) {
	t.Parallel()
	pool := newDB(t)
	srv := httptest.NewServer(orders.NewHandler(newService(t, pool), nil))
	t.Cleanup(srv.Close)
	for _, tc := range []struct{ body, field, says string }{
		{`{"customer": "ada", "sku": "widget", "quantity": 0}`, "quantity", "between 1 and 10000"},
		{`{"customer": "ada", "sku": "widget", "quantity": 10001}`, "quantity", "between 1 and 10000"},
		{`{"customer": "ada", "sku": "widget", "quantity": "3"}`, "quantity", "must be a JSON integer"},
		{`{"customer": "ada", "sku": "widget", "quantity": 1.5}`, "quantity", "must be a JSON integer"},
		{`{"sku": "widget", "quantity": 1}`, "customer", "must not be empty"},
		{`{"customer": "a\u0000b", "sku": "widget", "quantity": 1}`, "customer", "control characters"},
		{`{"customer": "ada", "quantity": 1}`, "sku", "must not be empty"},
		{`{"customer": "ada", "sku": "wid get", "quantity": 1}`, "sku", "ASCII letters"},
		{`{"customer": "ada", "sku": "widget", "quantity": 1, "price": 5}`, "price", "unknown field"},
		{`{"customer": "ada", "sku": "widget", "quantity": 1} {}`, "", "one JSON object"},
		{`{"customer": "ada",`, "", "invalid JSON"},
		{``, "", "empty"},
		{`{"customer": "` + strings.Repeat("a", 201) + `", "sku": "widget", "quantity": 1}`, "customer", "at most 200 bytes"},
	} {
		status, body, _ := post(t, srv.URL, tc.body)
		if status != http.StatusBadRequest || body["field"] != tc.field || !strings.Contains(body["error"], tc.says) {
			t.Errorf("POST %s: %d %v, want 400 naming field %q and saying %q", tc.body, status, body, tc.field, tc.says)
		}
	}
	status, body, _ := post(t, srv.URL, `{"customer": "`+strings.Repeat("a", 70<<10)+`", "sku": "widget", "quantity": 1}`)
	if status != http.StatusRequestEntityTooLarge || !strings.Contains(body["error"], "64 KiB") {
		t.Errorf("POST of 70 KiB: %d %v, want 413", status, body)
	}
	if o, e := count(t, pool, `SELECT count(*) FROM orders`), count(t, pool, `SELECT count(*) FROM outbox.events`); o != 0 || e != 0 {
		t.Fatalf("%d orders and %d events after bad requests only, want none", o, e)
	}
}

// POST places the order (201, its id, a Location); GET reads it back.
func TestPlaceAndGetOverHTTP(t *testing.T) {
	t.Parallel()
	pool := newDB(t)
	srv := httptest.NewServer(orders.NewHandler(newService(t, pool), nil))
	t.Cleanup(srv.Close)
	status, body, header := post(t, srv.URL, `{"customer": "ada", "sku": "widget", "quantity": 2}`)
	if status != http.StatusCreated || body["id"] == "" || header.Get("Location") != "/orders/"+body["id"] {
		t.Fatalf("POST: %d %v Location %q, want 201 with an id and its Location", status, body, header.Get("Location"))
	}
	resp, err := http.Get(srv.URL + header.Get("Location"))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var o orders.Order
	if err := json.NewDecoder(resp.Body).Decode(&o); err != nil {
		t.Fatal(err)
	}
	if resp.StatusCode != http.StatusOK || o.ID.String() != body["id"] || o.Customer != "ada" || o.SKU != "widget" || o.Quantity != 2 {
		t.Fatalf("GET: %d %+v, want the order placed", resp.StatusCode, o)
	}
	for path, want := range map[string]int{
		"/orders/0195d2b4-0000-7000-8000-000000000000": http.StatusNotFound,
		"/orders/not-a-uuid":                           http.StatusBadRequest,
	} {
		resp, err := http.Get(srv.URL + path)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != want {
			t.Errorf("GET %s: %d, want %d", path, resp.StatusCode, want)
		}
	}
	if n := count(t, pool, `SELECT count(*) FROM outbox.events`); n != 1 {
		t.Fatalf("%d events, want 1", n)
	}
}
