package outboxadmin

import (
	"embed"
	"errors"
	"fmt"
	"html/template"
	"io/fs"
	"math"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"
)

//go:embed templates/*.html
var templateFiles embed.FS

//go:embed assets
var assetFiles embed.FS

// pageNames are the dashboard's pages, each templates/<name>.html inside layout.html.
var pageNames = []string{"overview", "types", "partitions", "dead", "blocked", "event", "audit", "pauses", "error"}

var pages = func() map[string]*template.Template {
	funcs := template.FuncMap{"age": formatAge, "rate": formatRate, "time": formatTime, "bytes": formatBytes}
	out := map[string]*template.Template{}
	for _, name := range pageNames {
		out[name] = template.Must(template.New("layout.html").Funcs(funcs).ParseFS(templateFiles, "templates/layout.html", "templates/"+name+".html"))
	}
	return out
}()

// dashboardRoutes registers the pages, the forms' POST targets and the assets.
func (h *Handler) dashboardRoutes() {
	p := h.o.PathPrefix
	h.mux.HandleFunc("GET "+p+"{$}", h.page("overview", h.overview))
	h.mux.HandleFunc("GET "+p+"types", h.page("types", h.overview))
	h.mux.HandleFunc("GET "+p+"partitions", h.page("partitions", h.overview))
	h.mux.HandleFunc("GET "+p+"dead", h.page("dead", h.deadPage))
	h.mux.HandleFunc("GET "+p+"blocked", h.page("blocked", h.blockedPage))
	h.mux.HandleFunc("GET "+p+"events/{id}", h.page("event", h.eventPage))
	h.mux.HandleFunc("GET "+p+"audit", h.page("audit", h.auditPage))
	h.mux.HandleFunc("GET "+p+"pauses", h.page("pauses", h.pausesPage))
	h.mux.HandleFunc("POST "+p+"ui/{action}", h.form)
	h.mux.HandleFunc("POST "+p+"ui/pause", h.pauseForm(false))
	h.mux.HandleFunc("POST "+p+"ui/resume", h.pauseForm(true))
	assets, err := fs.Sub(assetFiles, "assets")
	if err != nil {
		panic(err) // the embedded tree is fixed at compile time
	}
	h.mux.Handle("GET "+p+"assets/", http.StripPrefix(p+"assets/", http.FileServerFS(assets)))
}

// view is what every page template gets.
type view struct {
	Prefix   string
	Page     string
	Title    string
	Refresh  int // seconds; 0: no auto-refresh (pages with forms)
	ReadOnly bool
	Message  string
	Error    string
	Data     any
}

// page renders the template name with the data load returns.
func (h *Handler) page(name string, load func(*http.Request) (string, int, any, error)) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		title, refresh, data, err := load(r)
		if err != nil {
			h.errorPage(w, r, err)
			return
		}
		h.render(w, http.StatusOK, name, view{
			Prefix: h.o.PathPrefix, Page: name, Title: title, Refresh: refresh, ReadOnly: h.o.ReadOnly,
			Message: r.URL.Query().Get("msg"), Data: data,
		})
	}
}

func (h *Handler) render(w http.ResponseWriter, code int, name string, v view) {
	var b strings.Builder
	if err := pages[name].Execute(&b, v); err != nil {
		h.o.Logger.Error("outboxadmin: render page", "page", name, "error", err)
		http.Error(w, "internal error (logged)", http.StatusInternalServerError)
		return
	}
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	w.WriteHeader(code)
	_, _ = w.Write([]byte(b.String()))
}

// errorPage answers err as a page with the API's status for it.
func (h *Handler) errorPage(w http.ResponseWriter, r *http.Request, err error) {
	code, msg := http.StatusInternalServerError, "internal error (logged)"
	switch {
	case errors.Is(err, errBadRequest):
		code, msg = http.StatusBadRequest, err.Error()
	case errors.Is(err, errNotFound):
		code, msg = http.StatusNotFound, err.Error()
	case errors.Is(err, errConflict):
		code, msg = http.StatusConflict, err.Error()
	default:
		if _, ok := errors.AsType[*http.MaxBytesError](err); ok {
			code, msg = http.StatusRequestEntityTooLarge, "request body too large"
		} else {
			h.o.Logger.Error("outboxadmin: page", "path", r.URL.Path, "error", err)
		}
	}
	h.render(w, code, "error", view{Prefix: h.o.PathPrefix, Page: "error", Title: http.StatusText(code), Error: msg, ReadOnly: h.o.ReadOnly})
}

// overviewData is the overview's (and the types and partitions pages') data.
type overviewData struct {
	Status
	// BacklogPoints and RatePoints are SVG polyline points over the history.
	BacklogPoints, RatePoints string
	MaxBacklog                int64
	MaxRate                   float64
}

func (h *Handler) overview(r *http.Request) (string, int, any, error) {
	st, err := h.status(r.Context())
	if err != nil {
		return "", 0, nil, err
	}
	d := overviewData{Status: st}
	for _, s := range st.History {
		d.MaxBacklog = max(d.MaxBacklog, s.Pending)
		d.MaxRate = max(d.MaxRate, s.PublishedPerSecond)
	}
	d.BacklogPoints = points(st.History, func(s Sample) float64 { return float64(s.Pending) }, float64(d.MaxBacklog))
	d.RatePoints = points(st.History, func(s Sample) float64 { return s.PublishedPerSecond }, d.MaxRate)
	return "Overview", int(h.o.Refresh.Seconds()), d, nil
}

// points lays samples out on a 300×60 chart, newest at the right.
func points(samples []Sample, value func(Sample) float64, top float64) string {
	if len(samples) == 0 {
		return ""
	}
	top = max(top, 1)
	var b strings.Builder
	for i, s := range samples {
		x := 300.0
		if len(samples) > 1 {
			x = float64(i) * 300 / float64(len(samples)-1)
		}
		y := 58 - value(s)/top*56
		fmt.Fprintf(&b, "%.1f,%.1f ", x, y)
	}
	return strings.TrimSpace(b.String())
}

// listData is a list page's data: rows, the filter it was listed with, the next page.
type listData struct {
	Filter Filter
	Query  url.Values
	Items  any
	Next   string
	// Matching is the number of dead letters the bulk forms would act on now: the count
	// they confirm.
	Matching int64
	All      bool
}

func (h *Handler) deadPage(r *http.Request) (string, int, any, error) {
	q := r.URL.Query()
	p, err := h.listEvents(r.Context(), q, StateDead)
	if err != nil {
		return "", 0, nil, err
	}
	f, _ := filterFromQuery(q) // listEvents checked it
	n, err := h.store.countDead(r.Context(), f)
	if err != nil {
		return "", 0, nil, err
	}
	keep := url.Values{}
	for _, k := range []string{"event_type", "aggregate_type", "aggregate_id", "created_from", "created_to"} {
		if v := q.Get(k); v != "" {
			keep.Set(k, v)
		}
	}
	return "Dead letters", 0, listData{Filter: f, Query: keep, Items: p.Items, Next: p.Next, Matching: n, All: f.empty()}, nil
}

func (h *Handler) blockedPage(r *http.Request) (string, int, any, error) {
	p, err := h.listBlocked(r.Context(), r.URL.Query())
	if err != nil {
		return "", 0, nil, err
	}
	return "Blocked aggregates", int(h.o.Refresh.Seconds()), listData{Items: p.Items, Next: p.Next}, nil
}

func (h *Handler) eventPage(r *http.Request) (string, int, any, error) {
	id, err := parseID(r.PathValue("id"))
	if err != nil {
		return "", 0, nil, err
	}
	d, err := h.store.event(r.Context(), id)
	if err != nil {
		return "", 0, nil, err
	}
	return "Event " + id.String(), 0, d, nil
}

func (h *Handler) auditPage(r *http.Request) (string, int, any, error) {
	p, err := h.listAudit(r.Context(), r.URL.Query())
	if err != nil {
		return "", 0, nil, err
	}
	return "Audit log", int(h.o.Refresh.Seconds()), listData{Items: p.Items, Next: p.Next}, nil
}

// form handles the dashboard's replay and discard forms (docs/adr/0021-admin-csrf.md): the
// same guards as the API, a same-origin check, the token from the form's field (never a
// cookie), then a redirect (303) to the page the form came from, with the outcome.
func (h *Handler) form(w http.ResponseWriter, r *http.Request) {
	action := Action(r.PathValue("action"))
	if action != ActionReplay && action != ActionDiscard {
		h.errorPage(w, r, fmt.Errorf("form %q: %w", action, errNotFound))
		return
	}
	r, ok := h.formChecks(w, r)
	if !ok {
		return
	}
	who, err := h.actor(r, r.PostForm.Get("actor"))
	if err != nil {
		h.errorPage(w, r, err)
		return
	}
	reason := r.PostForm.Get("reason")
	if err := validateChange(who, reason); err != nil {
		h.errorPage(w, r, err)
		return
	}
	back := h.o.PathPrefix + "dead"
	var res Result
	if s := r.PostForm.Get("id"); s != "" {
		id, perr := parseID(s)
		if perr != nil {
			h.errorPage(w, r, perr)
			return
		}
		back = h.o.PathPrefix + "events/" + id.String()
		res, err = h.changeOne(r.Context(), action, id, who, reason)
	} else {
		var f Filter
		if f, err = filterFromQuery(r.PostForm); err != nil {
			h.errorPage(w, r, err)
			return
		}
		if f.empty() && r.PostForm.Get("all") != "true" {
			h.errorPage(w, r, badRequest("the filter is empty: tick 'all dead letters' to act on every one"))
			return
		}
		c := change{action: action, filter: f, actor: who, reason: reason}
		if s := r.PostForm.Get("expect"); s != "" {
			n, perr := strconv.ParseInt(s, 10, 64)
			if perr != nil {
				h.errorPage(w, r, badRequest("expect %q is not a number", s))
				return
			}
			c.expect = &n
		}
		res, err = h.change(r.Context(), c)
	}
	if err != nil {
		h.errorPage(w, r, err)
		return
	}
	msg := fmt.Sprintf("%s: %d event(s) (audit #%d)", action, res.Affected, res.AuditID)
	//nolint:gosec // back is PathPrefix and "dead" or a parsed UUID, never the request's text
	http.Redirect(w, r, back+"?"+url.Values{"msg": {msg}}.Encode(), http.StatusSeeOther)
}

// formChecks runs the checks every dashboard form passes: the API's guards, the same
// origin, the token from the form's field (never a cookie). It reports whether r may go
// on — returning it with r.PostForm parsed and the operator its token names — or else
// it answered.
func (h *Handler) formChecks(w http.ResponseWriter, r *http.Request) (*http.Request, bool) {
	if !h.guard(w, r) {
		return r, false
	}
	if !sameOrigin(r) {
		h.render(w, http.StatusForbidden, "error", view{Prefix: h.o.PathPrefix, Page: "error", Title: "Forbidden", Error: "cross-site form submission refused"})
		return r, false
	}
	if err := r.ParseForm(); err != nil {
		h.errorPage(w, r, badRequestErr(err))
		return r, false
	}
	operator, ok := h.authenticate(r.PostForm.Get("token"))
	if !ok {
		h.render(w, http.StatusUnauthorized, "error", view{Prefix: h.o.PathPrefix, Page: "error", Title: "Unauthorized", Error: "the token is missing or wrong"})
		return r, false
	}
	return authenticated(r, operator), true
}

func badRequestErr(err error) error { return badRequest("%v", err) }

// sameOrigin refuses a form posted from another site: by Sec-Fetch-Site when the browser
// sends it, else by Origin against Host. A request with neither (curl, an old browser)
// passes: the token, which a cross-site page cannot know, is the protection; these are
// defence in depth.
func sameOrigin(r *http.Request) bool {
	switch r.Header.Get("Sec-Fetch-Site") {
	case "cross-site", "same-site":
		return false
	case "same-origin", "none":
		return true
	}
	o := r.Header.Get("Origin")
	if o == "" {
		return true
	}
	u, err := url.Parse(o)
	return err == nil && u.Host == r.Host
}

func formatAge(seconds float64) string {
	d := time.Duration(seconds * float64(time.Second)).Round(time.Second)
	switch {
	case seconds <= 0:
		return "–"
	case d < time.Minute:
		return d.String()
	case d < time.Hour:
		return d.Round(time.Second).String()
	default:
		return d.Round(time.Minute).String()
	}
}

func formatRate(r float64) string {
	if r == 0 || math.IsNaN(r) {
		return "0"
	}
	return strconv.FormatFloat(r, 'f', 1, 64)
}

func formatTime(t any) string {
	switch v := t.(type) {
	case time.Time:
		return v.UTC().Format("2006-01-02 15:04:05Z")
	case *time.Time:
		if v == nil {
			return "–"
		}
		return v.UTC().Format("2006-01-02 15:04:05Z")
	}
	return ""
}

func formatBytes(n int64) string {
	const unit = 1024
	if n < unit {
		return strconv.FormatInt(n, 10) + " B"
	}
	div, exp := int64(unit), 0
	for m := n / unit; m >= unit; m /= unit {
		div *= unit
		exp++
	}
	return fmt.Sprintf("%.1f %ciB", float64(n)/float64(div), "KMGTPE"[exp])
}
