package console

import (
	"errors"
	"fmt"
	"net/http"
	"strconv"

	"github.com/pgbox/pgbox/admin"
)

// statusError is an error with the HTTP status to answer it with and a
// message for the operator.
type statusError struct {
	status int
	msg    string
}

// Error returns the message for the operator.
func (e *statusError) Error() string { return e.msg }

// httpError returns a statusError whose message is formatted: it says what
// is wrong and what to do about it.
func httpError(status int, format string, args ...any) error {
	return &statusError{status: status, msg: fmt.Sprintf(format, args...)}
}

// errorRetry is how often, in seconds, an error page for a GET that
// failed on the server's side (5xx) tries the page again: a schema being
// migrated, a database under strain. A database that cannot be reached
// is tried sooner (unreachableRetry); a request's own mistake (4xx) is
// not tried again.
const errorRetry = 15

// errorView is what the error page shows.
type errorView struct {
	// AtOverview says the overview itself failed: no link back to it.
	AtOverview bool
	// Check lists what to look at when the database could not be
	// reached.
	Check []string
	// Detail is the driver's own error, redacted, under Message when that
	// explains it.
	Detail string
	// Message is the error's text, redacted, or what it means.
	Message string
	// Retry, if set, is the page to try again: the one that failed, for a
	// GET.
	Retry string
	// Server says the error is the console's or its target's (5xx), not
	// the request's: the page says which target it came from.
	Server bool
}

// fail renders err as an error page: a statusError with its status, a
// message or row not found as 404, a database that cannot be reached as
// 503 (saying what is wrong and what to check, and refreshing itself),
// anything else (the database, the schema) as 500, with its text redacted
// and logged.
func (c *Console) fail(w http.ResponseWriter, r *http.Request, t *Target, err error) {
	status := http.StatusInternalServerError
	var (
		se  *statusError
		out *outage
	)
	switch {
	case errors.As(err, &se):
		status = se.status
	case errors.Is(err, admin.ErrNotFound):
		status = http.StatusNotFound
	default:
		if out = unreachable(err); out != nil {
			status = http.StatusServiceUnavailable
		}
	}
	v := errorView{AtOverview: r.URL.Path == "/", Message: c.errorText(err), Server: status >= 500}
	if r.Method == http.MethodGet && v.Server {
		v.Retry = r.URL.RequestURI()
	}
	page := view{Title: http.StatusText(status), Data: &v}
	if v.Retry != "" { // a GET that failed on the server's side: it may work in a while; an action is never posted again
		page.Refresh = errorRetry
	}
	switch {
	case status == http.StatusInternalServerError:
		page.Title = "Failed"
		c.cfg.Logger.ErrorContext(r.Context(), "console: request failed", "path", r.URL.Path, "target", t.Name, "err", v.Message)
	case out != nil:
		page.Title = "Database unreachable"
		c.cfg.Logger.ErrorContext(r.Context(), "console: database unreachable", "path", r.URL.Path, "target", t.Name, "err", v.Message)
		v.Check, v.Detail, v.Message = out.Check, v.Message, out.What
		if v.Retry != "" { // sooner: the page asked for shows again once the database answers
			page.Refresh = unreachableRetry
			w.Header().Set("Retry-After", strconv.Itoa(unreachableRetry))
		}
	}
	if rerr := c.render(w, r, t, status, "error", page); rerr != nil {
		c.cfg.Logger.ErrorContext(r.Context(), "console: render the error page", "err", c.errorText(rerr))
	}
}

// errorText is err's text as a page or a log line may show it, secrets
// redacted; "" for nil.
func (c *Console) errorText(err error) string {
	if err == nil {
		return ""
	}
	return c.cfg.Redact(err.Error())
}
