package console

import "net/http"

// handlerFunc serves a page or an action on target t: it renders a page
// or redirects, or returns an error for fail to render as an error page.
type handlerFunc func(w http.ResponseWriter, r *http.Request, t *Target) error

// route is one page or action of the console.
type route struct {
	// action says it changes something: a POST, behind guardAction.
	action bool
	// handle serves it.
	handle handlerFunc
	// pattern is its http.ServeMux pattern: a method and a path.
	pattern string
}

// routes lists every page and action the console serves; the stylesheet
// and icon come besides, under /assets/.
func (c *Console) routes() []route {
	page := func(pattern string, h handlerFunc) route { return route{handle: h, pattern: pattern} }
	action := func(pattern string, h handlerFunc) route { return route{action: true, handle: h, pattern: pattern} }
	return []route{
		page("GET /{$}", c.overview),
		page("GET /failures", c.failures),
		page("GET /messages", c.messages),
		page("GET /message", c.message),
		page("GET /outbox", c.outbox),
		page("GET /outbox/row", c.outboxRow),
		page("GET /scheduled", c.scheduled),
		page("GET /audit", c.audit),
		page("GET /jobs/{id}", c.job),
		action("POST /replay", c.replay),
		action("POST /discard", c.discard),
		action("POST /scheduled/cancel", c.cancelScheduled),
		action("POST /outbox/retry", c.outboxRetry),
		// Pauses (pause.go).
		action("POST /pause", c.pause),
		action("POST /resume", c.resume),
		page("GET /message/edit", c.editMessage),
		action("POST /edit", c.edit),
		action("POST /processes/release", c.releaseLeases),
	}
}

// newMux maps every route to its handler behind the guards: authentication
// for all (the stylesheet and icon too), and for actions the read-only
// switch, the cross-origin and CSRF checks and, without credentials, the
// loopback host check.
func (c *Console) newMux() *http.ServeMux {
	mux := http.NewServeMux()
	for _, rt := range c.routes() {
		h := c.withTarget(rt.handle)
		if rt.action {
			h = c.guardAction(h)
		}
		mux.Handle(rt.pattern, c.guard(h))
	}
	mux.Handle("GET /assets/", c.guard(assetHandler()))
	return mux
}

// withTarget runs h on the target the request names (?db=NAME, or the
// first), and renders what h returns as an error page.
func (c *Console) withTarget(h handlerFunc) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		t := &c.cfg.Targets[0]
		if name := r.FormValue("db"); name != "" {
			if t = c.targets[name]; t == nil {
				c.fail(w, r, &c.cfg.Targets[0], httpError(http.StatusNotFound, "This console shows no database named %q: pick one from the switcher at the top.", name))
				return
			}
		}
		if err := h(w, r, t); err != nil {
			c.fail(w, r, t, err)
		}
	})
}
