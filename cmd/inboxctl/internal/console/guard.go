package console

import (
	"context"
	"net"
	"net/http"
	"os"

	"github.com/pgbox/pgbox/admin"
)

// securityHeaders apply to every response (ServeHTTP sets them). The policy allows no script at
// all, and styles and images only from the console itself: whatever a
// payload or an error text holds, it can run nothing.
var securityHeaders = map[string]string{
	"Content-Security-Policy": "default-src 'none'; style-src 'self'; img-src 'self'; form-action 'self'; " +
		"frame-ancestors 'none'; base-uri 'none'",
	"Cache-Control":          "no-store",
	"Referrer-Policy":        "no-referrer",
	"X-Content-Type-Options": "nosniff",
	"X-Frame-Options":        "DENY",
}

// userKey keys the authenticated user in a request's context.
type userKey struct{}

// user returns who makes r: the user its credentials name, or the
// console's Actor when it has none.
func user(r *http.Request) string {
	u, _ := r.Context().Value(userKey{}).(string)
	return u
}

// actor is who makes r, as the audit log records it: the signed-in user
// (or the console's Actor), from the request's remote address, through
// this process.
func actor(r *http.Request) admin.Actor {
	return admin.Actor{Host: remoteHost(r), Name: user(r), PID: os.Getpid()}
}

// refuseHost, on a console without credentials, answers a request whose
// Host is neither loopback nor an IP address 403 and reports true: every
// request, pages, the stylesheet and the mux's own 404 alike, since any
// of them would let a page that rebinds its DNS name read what the
// console shows (see trustedHost). With credentials, the browser sends
// them to the console's own origin only, and any Host is served.
func (c *Console) refuseHost(w http.ResponseWriter, r *http.Request) bool {
	if c.cfg.Credentials.set() || trustedHost(r.Host) {
		return false
	}
	c.cfg.Logger.WarnContext(r.Context(), "console: host refused", "path", r.URL.Path, "host", r.Host, "remote", remoteHost(r))
	http.Error(w, "Refused: a console without credentials answers only at localhost or an IP address, not at "+r.Host+
		" (a page of another site can point a name of its own at this machine, and read what the console shows). Open it at "+
		loopbackURL(r.Host)+" (or at this machine's IP address), or start it with credentials.", http.StatusForbidden)
	return true
}

// guard, with credentials configured, answers a request without valid
// ones 401, asking the browser for them; it names who makes the request
// in its context, for user.
func (c *Console) guard(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		name := c.cfg.Actor
		if c.cfg.Credentials.set() {
			var ok bool
			if name, ok = c.cfg.Credentials.authenticate(r); !ok {
				c.cfg.Logger.WarnContext(r.Context(), "console: authentication refused", "path", r.URL.Path, "remote", remoteHost(r))
				w.Header().Set("WWW-Authenticate", `Basic realm="inboxctl console", charset="UTF-8"`)
				http.Error(w, "Sign in: this console needs the user and password (or the token as the password) it was started with.",
					http.StatusUnauthorized)
				return
			}
		}
		next.ServeHTTP(w, r.WithContext(context.WithValue(r.Context(), userKey{}, name)))
	})
}

// crossOrigin refuses state-changing requests that a browser says come
// from another site (Sec-Fetch-Site, or an Origin that is not the Host).
var crossOrigin = http.NewCrossOriginProtection()

// guardAction lets an action through only when the console is not read
// only, the request comes from the console's own pages (the cross-origin
// check and the CSRF token) and, on a console without credentials, names
// a loopback host: a page of another site that rebinds its DNS name to
// 127.0.0.1 sends its own name as the Host.
func (c *Console) guardAction(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		refuse := func(status int, why string) {
			c.cfg.Logger.WarnContext(r.Context(), "console: action refused", "path", r.URL.Path, "user", user(r),
				"remote", remoteHost(r), "why", why)
			http.Error(w, why, status)
		}
		switch {
		case c.cfg.ReadOnly:
			refuse(http.StatusForbidden, "This console is read-only (--read-only): it changes nothing. Use inboxctl, or a console started without --read-only.")
		case crossOrigin.Check(r) != nil:
			refuse(http.StatusForbidden, "Refused: this request came from another site. Use the console's own pages.")
		case !c.validCSRF(user(r), r.PostFormValue("csrf")):
			refuse(http.StatusForbidden, "Refused: the form's CSRF token is missing or stale. Go back, reload the page and try again.")
		case !c.cfg.Credentials.set() && !loopbackHost(r.Host):
			refuse(http.StatusForbidden, "Refused: a console without credentials accepts actions only from its pages opened at localhost or 127.0.0.1, "+
				"not at "+r.Host+". Open it at "+loopbackURL(r.Host)+" and try again.")
		default:
			next.ServeHTTP(w, r)
		}
	})
}

// remoteHost is the address a request came from, without its port.
func remoteHost(r *http.Request) string {
	if h, _, err := net.SplitHostPort(r.RemoteAddr); err == nil {
		return h
	}
	return r.RemoteAddr
}

// loopbackURL is the console's address at 127.0.0.1, on the port of host
// (a Host header).
func loopbackURL(host string) string {
	if _, port, err := net.SplitHostPort(host); err == nil {
		return "http://" + net.JoinHostPort("127.0.0.1", port) + "/"
	}
	return "http://127.0.0.1/"
}
