package outboxadmin

import (
	"context"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"strconv"
	"strings"

	"github.com/google/uuid"

	"github.com/outboxkit/outbox/internal/redact"
)

// Handler serves the admin API and the dashboard. Create it with [New].
type Handler struct {
	o       Options
	store   *store
	mux     *http.ServeMux
	limiter *limiter
	hist    history
	token   [sha256.Size]byte
	// operators are Options.Operators' tokens, hashed, with their names
	operators []operatorToken
}

// operatorToken is one operator's token, hashed, and the name it authenticates.
type operatorToken struct {
	name string
	sum  [sha256.Size]byte
}

// New returns a Handler for o; it refuses options that would leave state-changing
// requests open (no Token and not ReadOnly).
func New(o Options) (*Handler, error) {
	o, quoted, err := o.withDefaults()
	if err != nil {
		return nil, fmt.Errorf("outboxadmin: %w", err)
	}
	paths, err := parsePaths(o.RedactPaths)
	if err != nil {
		return nil, fmt.Errorf("outboxadmin: %w", err)
	}
	h := &Handler{
		o:       o,
		store:   &store{o: o, q: newStatements(quoted), redact: paths},
		mux:     http.NewServeMux(),
		limiter: newLimiter(o.RateLimit, o.RateBurst),
		token:   sha256.Sum256([]byte(o.Token)),
	}
	for name, tok := range o.Operators {
		h.operators = append(h.operators, operatorToken{name: name, sum: sha256.Sum256([]byte(tok))})
	}
	h.routes()
	return h, nil
}

func (h *Handler) routes() {
	p := h.o.PathPrefix
	h.mux.HandleFunc("GET "+p+"api/status", h.apiStatus)
	h.mux.HandleFunc("GET "+p+"api/events", h.apiEvents)
	h.mux.HandleFunc("GET "+p+"api/dead", h.apiDead)
	h.mux.HandleFunc("GET "+p+"api/blocked", h.apiBlocked)
	h.mux.HandleFunc("GET "+p+"api/events/{id}", h.apiEvent)
	h.mux.HandleFunc("GET "+p+"api/audit", h.apiAudit)
	h.mux.HandleFunc("GET "+p+"api/pauses", h.apiPauses)
	h.mux.HandleFunc("POST "+p+"api/pause", h.mutating(h.apiPauseOrResume(false)))
	h.mux.HandleFunc("POST "+p+"api/resume", h.mutating(h.apiPauseOrResume(true)))
	h.mux.HandleFunc("POST "+p+"api/replay", h.mutating(h.apiBulk(ActionReplay)))
	h.mux.HandleFunc("POST "+p+"api/discard", h.mutating(h.apiBulk(ActionDiscard)))
	h.mux.HandleFunc("POST "+p+"api/events/{id}/replay", h.mutating(h.apiOne(ActionReplay)))
	h.mux.HandleFunc("POST "+p+"api/events/{id}/discard", h.mutating(h.apiOne(ActionDiscard)))
	h.dashboardRoutes()
}

// ServeHTTP serves r, with the security headers every answer carries.
func (h *Handler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	hd := w.Header()
	hd.Set("X-Content-Type-Options", "nosniff")
	hd.Set("Referrer-Policy", "no-referrer")
	hd.Set("X-Frame-Options", "DENY")
	hd.Set("Content-Security-Policy", "default-src 'none'; style-src 'self'; img-src 'self'; form-action 'self'; frame-ancestors 'none'; base-uri 'none'")
	hd.Set("Cache-Control", "no-store")
	ctx, cancel := context.WithTimeout(r.Context(), h.o.QueryTimeout)
	defer cancel()
	h.mux.ServeHTTP(w, r.WithContext(ctx))
}

// parsePaths parses Options.RedactPaths, naming the one it refuses.
func parsePaths(paths []string) ([]redact.Path, error) {
	var out []redact.Path
	for i, s := range paths {
		p, err := redact.ParsePath(s)
		if err != nil {
			return nil, fmt.Errorf("RedactPaths[%d]: %w", i, err)
		}
		out = append(out, p)
	}
	return out, nil
}

// authenticate reports whether got is the Token or an operator's token, and which
// operator's ("" for the shared Token). Every candidate is compared, in constant time
// (over hashes, so neither a token's length nor a prefix of it leaks through timing).
func (h *Handler) authenticate(got string) (operator string, ok bool) {
	if got == "" {
		return "", false
	}
	sum := sha256.Sum256([]byte(got))
	if h.o.Token != "" && subtle.ConstantTimeCompare(sum[:], h.token[:]) == 1 {
		ok = true
	}
	for _, op := range h.operators {
		if subtle.ConstantTimeCompare(sum[:], op.sum[:]) == 1 {
			operator, ok = op.name, true
		}
	}
	return operator, ok
}

// operatorKey carries the name of the operator who authenticated a request.
type operatorKey struct{}

// authenticated returns r with the operator the token named (none for the shared Token).
func authenticated(r *http.Request, operator string) *http.Request {
	if operator == "" {
		return r
	}
	return r.WithContext(context.WithValue(r.Context(), operatorKey{}, operator))
}

// actor is who a change is recorded as: the operator whose own token authenticated r,
// whatever the request says, else the actor the request names — which may not be an
// operator's name (only their own token acts as them).
func (h *Handler) actor(r *http.Request, named string) (string, error) {
	if op, ok := r.Context().Value(operatorKey{}).(string); ok {
		return op, nil
	}
	for _, op := range h.operators {
		if strings.EqualFold(strings.TrimSpace(named), op.name) {
			return "", badRequest("actor %q is an operator's name: only that operator's own token acts as them", named)
		}
	}
	return named, nil
}

// bearer is r's bearer token, "" without one.
func bearer(r *http.Request) string {
	got, ok := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer ")
	if !ok {
		return ""
	}
	return got
}

// guard runs the checks every state-changing request passes, in order: the rate limit
// (429), read-only mode (403), the request size (413, from Content-Length; bodies are
// also read through a bound). It reports whether r may go on; otherwise it answered.
func (h *Handler) guard(w http.ResponseWriter, r *http.Request) bool {
	if ok, wait := h.limiter.allow(); !ok {
		w.Header().Set("Retry-After", strconv.Itoa(int(wait.Seconds())+1))
		writeError(w, http.StatusTooManyRequests, "too many state-changing requests: try again later")
		return false
	}
	if h.o.ReadOnly {
		writeError(w, http.StatusForbidden, "the admin is read-only")
		return false
	}
	if r.ContentLength > h.o.MaxBodyBytes {
		writeError(w, http.StatusRequestEntityTooLarge, fmt.Sprintf("request body over %d bytes", h.o.MaxBodyBytes))
		return false
	}
	r.Body = http.MaxBytesReader(w, r.Body, h.o.MaxBodyBytes)
	return true
}

// mutating wraps an API handler that changes state: guard, then the bearer token (401).
func (h *Handler) mutating(next http.HandlerFunc) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		if !h.guard(w, r) {
			return
		}
		operator, ok := h.authenticate(bearer(r))
		if !ok {
			w.Header().Set("WWW-Authenticate", `Bearer realm="outbox"`)
			writeError(w, http.StatusUnauthorized, "a bearer token is required")
			return
		}
		next(w, authenticated(r, operator))
	}
}

// apiRequest is the body of a replay or discard.
type apiRequest struct {
	Filter *Filter `json:"filter"`
	// All must be true to act on every dead letter (an empty filter).
	All    bool   `json:"all"`
	Actor  string `json:"actor"`
	Reason string `json:"reason"`
	// Expect, when set, is the count the operator confirmed (from a dry run): a
	// different count changes nothing (409).
	Expect *int64 `json:"expect"`
	DryRun bool   `json:"dry_run"`
}

// decode reads r's JSON body into v: unknown fields are refused (a misspelt filter field
// must not widen a bulk action to every event).
func decode(r *http.Request, v any) error {
	dec := json.NewDecoder(r.Body)
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		if _, ok := errors.AsType[*http.MaxBytesError](err); ok {
			return err
		}
		return badRequest("body: %v", err)
	}
	if dec.More() {
		return badRequest("body: more than one JSON value")
	}
	return nil
}

// validateChange checks what every change needs: an actor and a reason.
func validateChange(actor, reason string) error {
	switch {
	case strings.TrimSpace(actor) == "":
		return badRequest("actor is required: replays and discards are audited")
	case strings.TrimSpace(reason) == "":
		return badRequest("reason is required: replays and discards are audited")
	case len(actor) > 200 || len(reason) > 2000:
		return badRequest("actor (200 bytes) or reason (2000 bytes) too long")
	}
	return nil
}

func (h *Handler) apiBulk(action Action) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		var req apiRequest
		err := decode(r, &req)
		if err != nil {
			h.fail(w, err)
			return
		}
		if req.Actor, err = h.actor(r, req.Actor); err != nil {
			h.fail(w, err)
			return
		}
		if err := validateChange(req.Actor, req.Reason); err != nil {
			h.fail(w, err)
			return
		}
		var f Filter
		if req.Filter != nil {
			f = *req.Filter
		}
		if f.empty() && !req.All {
			h.fail(w, badRequest(`the filter is empty: name events, or send "all": true to %s every dead letter`, action))
			return
		}
		res, err := h.change(r.Context(), change{action: action, filter: f, actor: req.Actor, reason: req.Reason, expect: req.Expect, dryRun: req.DryRun})
		if err != nil {
			h.fail(w, err)
			return
		}
		writeJSON(w, http.StatusOK, res)
	}
}

func (h *Handler) apiOne(action Action) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		id, err := parseID(r.PathValue("id"))
		if err != nil {
			h.fail(w, err)
			return
		}
		var req struct {
			Actor  string `json:"actor"`
			Reason string `json:"reason"`
		}
		if err := decode(r, &req); err != nil {
			h.fail(w, err)
			return
		}
		if req.Actor, err = h.actor(r, req.Actor); err != nil {
			h.fail(w, err)
			return
		}
		if err := validateChange(req.Actor, req.Reason); err != nil {
			h.fail(w, err)
			return
		}
		res, err := h.changeOne(r.Context(), action, id, req.Actor, req.Reason)
		if err != nil {
			h.fail(w, err)
			return
		}
		writeJSON(w, http.StatusOK, res)
	}
}

// changeOne replays or discards one event, and explains a refusal: 404 for no such
// event, 409 for one in another state.
func (h *Handler) changeOne(ctx context.Context, action Action, id uuid.UUID, actor, reason string) (Result, error) {
	res, err := h.change(ctx, change{action: action, filter: Filter{ID: &id}, actor: actor, reason: reason, pending: action == ActionDiscard})
	if err != nil || res.Affected == 1 {
		return res, err
	}
	ev, err := h.store.event(ctx, id)
	if err != nil {
		return res, err
	}
	return res, fmt.Errorf("%w: event %s is %s: only %s", errConflict, id, ev.State, map[Action]string{
		ActionReplay:  "dead events can be replayed (a discarded one no longer holds its aggregate: replaying it would break the order)",
		ActionDiscard: "pending or dead events can be discarded",
	}[action])
}

// change applies c and logs it.
func (h *Handler) change(ctx context.Context, c change) (Result, error) {
	res, err := h.store.apply(ctx, c)
	if err != nil {
		return res, err
	}
	if !c.dryRun {
		h.o.Logger.Info("outboxadmin: "+string(c.action), "actor", c.actor, "reason", c.reason,
			"filter", c.filter, "affected", res.Affected, "audit_id", res.AuditID)
	}
	return res, nil
}

// fail answers err with its status: 400, 404, 409, 413 or (logged, not shown) 500.
func (h *Handler) fail(w http.ResponseWriter, err error) {
	if _, ok := errors.AsType[*http.MaxBytesError](err); ok {
		writeError(w, http.StatusRequestEntityTooLarge, fmt.Sprintf("request body over %d bytes", h.o.MaxBodyBytes))
		return
	}
	switch {
	case errors.Is(err, errBadRequest):
		writeError(w, http.StatusBadRequest, err.Error())
	case errors.Is(err, errNotFound):
		writeError(w, http.StatusNotFound, err.Error())
	case errors.Is(err, errConflict):
		writeError(w, http.StatusConflict, err.Error())
	case errors.Is(err, context.DeadlineExceeded):
		h.o.Logger.Error("outboxadmin: request timed out", slog.Any("error", err))
		writeError(w, http.StatusServiceUnavailable, "the database did not answer in time")
	default:
		h.o.Logger.Error("outboxadmin: internal error", slog.Any("error", err))
		writeError(w, http.StatusInternalServerError, "internal error (logged)")
	}
}

func writeJSON(w http.ResponseWriter, code int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(code)
	_ = json.NewEncoder(w).Encode(v)
}

func writeError(w http.ResponseWriter, code int, msg string) {
	writeJSON(w, code, map[string]string{"error": msg})
}
