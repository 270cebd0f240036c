package orders

import (
	"encoding/json"
	"errors"
	"io"
	"log/slog"
	"net/http"
	"reflect"
	"strings"

	"github.com/google/uuid"
)

// maxBodyBytes bounds a request body.
const maxBodyBytes = 64 << 10

// NewHandler returns the service's HTTP API:
//
//   - POST /orders with {"customer": …, "sku": …, "quantity": …} places an order: 201
//     with {"id": …} and a Location header; 400 with {"error": …, "field": …} naming
//     the field for an invalid order or body (an unknown field, a value of the wrong
//     type); nothing is written then.
//   - GET /orders/{id}: 200 with the order; 404 when there is none.
//
// Errors are JSON {"error": …}; a failure of the database is logged to logger (nil:
// slog.Default()) and answered 500 without its details.
func NewHandler(s *Service, logger *slog.Logger) http.Handler {
	if logger == nil {
		logger = slog.Default()
	}
	h := &handler{s: s, log: logger}
	mux := http.NewServeMux()
	mux.HandleFunc("POST /orders", h.place)
	mux.HandleFunc("GET /orders/{id}", h.get)
	return mux
}

type handler struct {
	s   *Service
	log *slog.Logger
}

// placeRequest is the body of POST /orders.
type placeRequest struct {
	Customer string `json:"customer"`
	SKU      string `json:"sku"`
	Quantity int    `json:"quantity"`
}

// errorBody is every error's body; Field names the invalid field, when one is.
type errorBody struct {
	Error string `json:"error"`
	Field string `json:"field,omitempty"`
}

func (h *handler) place(w http.ResponseWriter, r *http.Request) {
	var req placeRequest
	if status, body := decode(w, r, &req); body != nil {
		writeJSON(w, status, body)
		return
	}
	o, err := h.s.PlaceOrder(r.Context(), Order{Customer: req.Customer, SKU: req.SKU, Quantity: req.Quantity})
	var verr *ValidationError
	switch {
	case errors.As(err, &verr):
		writeJSON(w, http.StatusBadRequest, errorBody{Error: verr.Error(), Field: verr.Field})
		return
	case err != nil:
		h.log.ErrorContext(r.Context(), "place order", slog.Any("error", err))
		writeJSON(w, http.StatusInternalServerError, errorBody{Error: "internal error"})
		return
	}
	w.Header().Set("Location", "/orders/"+o.ID.String())
	writeJSON(w, http.StatusCreated, map[string]string{"id": o.ID.String()})
}

func (h *handler) get(w http.ResponseWriter, r *http.Request) {
	id, err := uuid.Parse(r.PathValue("id"))
	if err != nil {
		writeJSON(w, http.StatusBadRequest, errorBody{Error: "id: must be a UUID", Field: "id"})
		return
	}
	o, err := h.s.Order(r.Context(), id)
	switch {
	case errors.Is(err, ErrNotFound):
		writeJSON(w, http.StatusNotFound, errorBody{Error: "no order " + id.String()})
	case err != nil:
		h.log.ErrorContext(r.Context(), "get order", slog.Any("error", err))
		writeJSON(w, http.StatusInternalServerError, errorBody{Error: "internal error"})
	default:
		writeJSON(w, http.StatusOK, o)
	}
}

// decode reads one JSON object of at most maxBodyBytes into v, refusing unknown fields.
// On failure it returns the status and body to answer with, naming the field when the
// failure is one field's.
func decode(w http.ResponseWriter, r *http.Request, v any) (int, *errorBody) {
	dec := json.NewDecoder(http.MaxBytesReader(w, r.Body, maxBodyBytes))
	dec.DisallowUnknownFields()
	err := dec.Decode(v)
	if err == nil {
		if _, terr := dec.Token(); !errors.Is(terr, io.EOF) {
			return http.StatusBadRequest, &errorBody{Error: "body: one JSON object expected, more followed"}
		}
	}
	var typeErr *json.UnmarshalTypeError
	var maxErr *http.MaxBytesError
	switch {
	case err == nil:
		return 0, nil
	case errors.As(err, &maxErr):
		return http.StatusRequestEntityTooLarge, &errorBody{Error: "body: larger than 64 KiB"}
	case errors.As(err, &typeErr) && typeErr.Field != "":
		return http.StatusBadRequest, &errorBody{Error: typeErr.Field + ": must be a JSON " + jsonKind(typeErr.Type) + ", got " + typeErr.Value, Field: typeErr.Field}
	case strings.HasPrefix(err.Error(), `json: unknown field "`):
		field := strings.TrimSuffix(strings.TrimPrefix(err.Error(), `json: unknown field "`), `"`)
		return http.StatusBadRequest, &errorBody{Error: field + ": unknown field", Field: field}
	case errors.Is(err, io.EOF):
		return http.StatusBadRequest, &errorBody{Error: "body: empty; send a JSON object"}
	default:
		return http.StatusBadRequest, &errorBody{Error: "body: invalid JSON: " + strings.TrimPrefix(err.Error(), "json: ")}
	}
}

// jsonKind names the JSON kind a Go type decodes from.
func jsonKind(t reflect.Type) string {
	switch t.Kind() {
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64,
		reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64:
		return "integer"
	case reflect.String:
		return "string"
	default:
		return t.Kind().String()
	}
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(v)
}
