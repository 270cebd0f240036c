package outboxadmin

import (
	"context"
	"net/http"
	"net/url"

	"github.com/google/uuid"
)

func parseID(s string) (uuid.UUID, error) {
	id, err := uuid.Parse(s)
	if err != nil {
		return id, badRequest("event id %q is not a UUID", s)
	}
	return id, nil
}

// limit reads the limit parameter: PageSize when absent, at most MaxPageSize.
func (h *Handler) limit(q url.Values) (int, error) {
	n, err := intParam(q, "limit", int64(h.o.PageSize))
	if err != nil {
		return 0, err
	}
	if n < 1 || n > int64(h.o.MaxPageSize) {
		return 0, badRequest("limit must be between 1 and %d", h.o.MaxPageSize)
	}
	return int(n), nil
}

// status samples the backlog and records the sample in the history.
func (h *Handler) status(ctx context.Context) (Status, error) {
	st, written, err := h.store.status(ctx, h.hist.maxSeq())
	if err != nil {
		return st, err
	}
	h.hist.add(&st, written)
	return st, nil
}

func (h *Handler) apiStatus(w http.ResponseWriter, r *http.Request) {
	st, err := h.status(r.Context())
	if err != nil {
		h.fail(w, err)
		return
	}
	writeJSON(w, http.StatusOK, st)
}

// Page is one page of a list: the rows, and the cursor of the next page (empty at the end).
type Page[T any] struct {
	Items []T `json:"items"`
	// Next is the value of the next page's cursor parameter (after or before); empty
	// when this page is the last.
	Next string `json:"next,omitempty"`
}

// eventsQuery reads the events list's parameters.
func (h *Handler) eventsQuery(q url.Values) (f Filter, state string, after int64, limit int, err error) {
	if f, err = filterFromQuery(q); err != nil {
		return
	}
	state = q.Get("state")
	if !validState(state) {
		err = badRequest("state %q: use pending, dead, published or discarded", state)
		return
	}
	if after, err = intParam(q, "after", 0); err != nil {
		return
	}
	limit, err = h.limit(q)
	return
}

func (h *Handler) listEvents(ctx context.Context, q url.Values, state string) (Page[Event], error) {
	f, st, after, limit, err := h.eventsQuery(q)
	if err != nil {
		return Page[Event]{}, err
	}
	if state != "" {
		st = state
	}
	items, err := h.store.events(ctx, f, st, after, limit)
	if err != nil {
		return Page[Event]{}, err
	}
	p := Page[Event]{Items: items}
	if len(items) == limit {
		p.Next = itoa(items[len(items)-1].Seq)
	}
	return p, nil
}

func (h *Handler) apiEvents(w http.ResponseWriter, r *http.Request) {
	p, err := h.listEvents(r.Context(), r.URL.Query(), "")
	if err != nil {
		h.fail(w, err)
		return
	}
	writeJSON(w, http.StatusOK, p)
}

func (h *Handler) apiDead(w http.ResponseWriter, r *http.Request) {
	if s := r.URL.Query().Get("state"); s != "" && s != StateDead {
		h.fail(w, badRequest("the dead letters are state dead; use /api/events for others"))
		return
	}
	p, err := h.listEvents(r.Context(), r.URL.Query(), StateDead)
	if err != nil {
		h.fail(w, err)
		return
	}
	writeJSON(w, http.StatusOK, p)
}

func (h *Handler) listBlocked(ctx context.Context, q url.Values) (Page[Blocked], error) {
	after, err := intParam(q, "after", 0)
	if err != nil {
		return Page[Blocked]{}, err
	}
	limit, err := h.limit(q)
	if err != nil {
		return Page[Blocked]{}, err
	}
	items, err := h.store.blocked(ctx, after, limit)
	if err != nil {
		return Page[Blocked]{}, err
	}
	p := Page[Blocked]{Items: items}
	if len(items) == limit {
		p.Next = itoa(items[len(items)-1].FirstDeadSeq)
	}
	return p, nil
}

func (h *Handler) apiBlocked(w http.ResponseWriter, r *http.Request) {
	p, err := h.listBlocked(r.Context(), r.URL.Query())
	if err != nil {
		h.fail(w, err)
		return
	}
	writeJSON(w, http.StatusOK, p)
}

func (h *Handler) apiEvent(w http.ResponseWriter, r *http.Request) {
	id, err := parseID(r.PathValue("id"))
	if err != nil {
		h.fail(w, err)
		return
	}
	d, err := h.store.event(r.Context(), id)
	if err != nil {
		h.fail(w, err)
		return
	}
	writeJSON(w, http.StatusOK, d)
}

func (h *Handler) listAudit(ctx context.Context, q url.Values) (Page[AuditEntry], error) {
	var before *int64
	if q.Get("before") != "" {
		b, err := intParam(q, "before", 0)
		if err != nil {
			return Page[AuditEntry]{}, err
		}
		before = &b
	}
	limit, err := h.limit(q)
	if err != nil {
		return Page[AuditEntry]{}, err
	}
	items, err := h.store.audit(ctx, before, limit, nil)
	if err != nil {
		return Page[AuditEntry]{}, err
	}
	p := Page[AuditEntry]{Items: items}
	if len(items) == limit {
		p.Next = itoa(items[len(items)-1].ID)
	}
	return p, nil
}

func (h *Handler) apiAudit(w http.ResponseWriter, r *http.Request) {
	p, err := h.listAudit(r.Context(), r.URL.Query())
	if err != nil {
		h.fail(w, err)
		return
	}
	writeJSON(w, http.StatusOK, p)
}
