package outboxadmin

import (
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"strconv"

	"github.com/outboxkit/outbox/relay"
)

// pauseRequest is the body of POST api/pause and api/resume.
type pauseRequest struct {
	Scope  relay.PauseScope `json:"scope"`
	Actor  string           `json:"actor"`
	Reason string           `json:"reason"`
}

// PauseResult is the answer to POST api/pause and api/resume: the pause, and for a
// pause whether this request made it (false: the scope was paused already, by the pause
// shown).
type PauseResult struct {
	Pause relay.Paused `json:"pause"`
	Made  bool         `json:"made"`
	// Warning says what did not go as it should without undoing the change: a resume
	// whose wake-up failed (the relays resume at their next poll).
	Warning string `json:"warning,omitempty"`
}

// pauseOrResume pauses (resume false) or resumes req's scope, mapping the relay's errors
// to the API's: a bad request names its field, a scope not paused is a conflict.
func (h *Handler) pauseOrResume(r *http.Request, req pauseRequest, resume bool) (PauseResult, error) {
	var err error
	if req.Actor, err = h.actor(r, req.Actor); err != nil {
		return PauseResult{}, err
	}
	if err := validateChange(req.Actor, req.Reason); err != nil {
		return PauseResult{}, err
	}
	pr := relay.PauseRequest{Schema: h.o.Schema, Scope: req.Scope, Actor: req.Actor, Reason: req.Reason}
	var res PauseResult
	if resume {
		res.Pause, err = relay.Resume(r.Context(), h.o.Pool, pr)
	} else {
		res.Pause, res.Made, err = relay.Pause(r.Context(), h.o.Pool, pr)
	}
	if errors.Is(err, relay.ErrNotWoken) { // resumed all the same
		res.Warning, err = err.Error(), nil
	}
	switch {
	case errors.Is(err, relay.ErrNotPaused):
		return res, fmt.Errorf("%w: %s is not paused", errConflict, req.Scope)
	case errors.Is(err, relay.ErrNoSuchPartition), errors.Is(err, relay.ErrInvalidPauseRequest):
		return res, badRequestErr(err)
	case err != nil:
		return res, err
	}
	verb := "paused"
	if resume {
		verb = "resumed"
	} else if !res.Made {
		verb = "already paused"
	}
	h.o.Logger.Info("outboxadmin: "+verb, "scope", req.Scope.String(), "actor", req.Actor, "reason", req.Reason, "pause_id", res.Pause.ID)
	return res, nil
}

func (h *Handler) apiPauseOrResume(resume bool) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		var req pauseRequest
		if err := decode(r, &req); err != nil {
			h.fail(w, err)
			return
		}
		res, err := h.pauseOrResume(r, req, resume)
		if err != nil {
			h.fail(w, err)
			return
		}
		code := http.StatusOK
		if res.Made {
			code = http.StatusCreated
		}
		writeJSON(w, code, res)
	}
}

// apiPauses lists the pauses: the active ones, or with ?history=true the resumed ones
// too (newest first, up to limit).
func (h *Handler) apiPauses(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	limit, err := h.limit(q)
	if err != nil {
		h.fail(w, err)
		return
	}
	history := q.Get("history") == "true"
	items, err := relay.ListPauses(r.Context(), h.o.Pool, h.o.Schema, history, limit)
	if err != nil {
		h.fail(w, err)
		return
	}
	writeJSON(w, http.StatusOK, Page[relay.Paused]{Items: items})
}

// pausesData is what the pauses page shows.
type pausesData struct {
	Active, History []relay.Paused
	Partitions      int
}

func (h *Handler) pausesPage(r *http.Request) (string, int, any, error) {
	active, err := relay.ListPauses(r.Context(), h.o.Pool, h.o.Schema, false, h.o.MaxPageSize)
	if err != nil {
		return "", 0, nil, err
	}
	history, err := relay.ListPauses(r.Context(), h.o.Pool, h.o.Schema, true, h.o.PageSize)
	if err != nil {
		return "", 0, nil, err
	}
	return "Pauses", 0, pausesData{Active: active, History: history}, nil
}

// pauseForm handles the pauses page's forms (ui/pause, ui/resume), with the checks of
// the replay and discard forms, then a redirect back to the page with the outcome.
func (h *Handler) pauseForm(resume bool) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		r, ok := h.formChecks(w, r)
		if !ok {
			return
		}
		f := r.PostForm
		req := pauseRequest{Scope: relay.PauseScope{Kind: relay.PauseKind(f.Get("kind")), AggregateType: f.Get("aggregate_type")}, Actor: f.Get("actor"), Reason: f.Get("reason")}
		if req.Scope.Kind == relay.PausePartition {
			n, err := strconv.Atoi(f.Get("partition"))
			if err != nil {
				h.errorPage(w, r, badRequest("partition %q is not a number", f.Get("partition")))
				return
			}
			req.Scope.Partition = n
		}
		res, err := h.pauseOrResume(r, req, resume)
		if err != nil {
			h.errorPage(w, r, err)
			return
		}
		msg := map[bool]string{true: "paused ", false: "already paused: "}[res.Made] + res.Pause.Scope.String()
		if resume {
			msg = "resumed " + res.Pause.Scope.String()
		}
		http.Redirect(w, r, h.o.PathPrefix+"pauses?"+url.Values{"msg": {msg}}.Encode(), http.StatusSeeOther)
	}
}
