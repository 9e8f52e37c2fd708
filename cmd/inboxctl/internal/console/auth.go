package console

import (
	"crypto/hmac"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/base64"
	"errors"
	"net"
	"net/http"
	"strings"
)

// Credentials are what a request must carry when set: a token, a user and
// password, or both ways.
type Credentials struct {
	// Password is User's password, for HTTP basic auth.
	Password string

	// Token, if set, is accepted as a bearer token (Authorization: Bearer
	// TOKEN; the audit log says "token") or as the password of HTTP basic
	// auth under any user name, which then names who acts in the audit log,
	// as inboxctl --as does.
	Token string

	// User is the one user name basic auth accepts with Password.
	User string
}

// set reports whether any credential is configured.
func (c Credentials) set() bool { return c.Token != "" || c.User != "" || c.Password != "" }

// validate reports credentials that cannot work: a user without a
// password (or the reverse), or a user name basic auth cannot carry.
func (c Credentials) validate() error {
	if (c.User == "") != (c.Password == "") {
		return errors.New("console: basic auth needs both a user and a password, in the form user:password")
	}
	if strings.Contains(c.User, ":") {
		return errors.New("console: a basic auth user name cannot contain ':' (the form is user:password)")
	}
	return nil
}

// authenticate returns the user r's credentials name, and whether they are
// accepted. Every secret is compared in constant time, and both of a
// user's are compared, so that a wrong guess takes as long whatever it got
// right.
func (c Credentials) authenticate(r *http.Request) (string, bool) {
	if token, ok := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer "); ok {
		return "token", c.Token != "" && equal(token, c.Token)
	}
	user, password, ok := r.BasicAuth()
	if !ok || user == "" {
		return "", false
	}
	if c.Token != "" && equal(password, c.Token) {
		return user, true
	}
	if c.User == "" {
		return "", false
	}
	userOK := equal(user, c.User)
	passwordOK := equal(password, c.Password)
	return user, userOK && passwordOK
}

// equal compares two secrets in constant time: the hashes have one length
// whatever the inputs', so neither the content nor the length leaks.
func equal(got, want string) bool {
	g, w := sha256.Sum256([]byte(got)), sha256.Sum256([]byte(want))
	return subtle.ConstantTimeCompare(g[:], w[:]) == 1
}

// csrfToken is the token every form of user carries and every action must
// return: a MAC of the user under the console's random key, so that a page
// of another site, which cannot read the console's pages, cannot make one.
func (c *Console) csrfToken(user string) string {
	mac := hmac.New(sha256.New, c.csrfKey)
	mac.Write([]byte("csrf\x00" + user))
	return base64.RawURLEncoding.EncodeToString(mac.Sum(nil))
}

// validCSRF reports whether token is user's.
func (c *Console) validCSRF(user, token string) bool {
	return token != "" && hmac.Equal([]byte(token), []byte(c.csrfToken(user)))
}

// loopbackHost reports whether a Host header names this machine's loopback
// interface: localhost, 127.0.0.0/8 or ::1, with or without a port.
func loopbackHost(host string) bool {
	if h, _, err := net.SplitHostPort(host); err == nil {
		host = h
	}
	host = strings.TrimSuffix(strings.TrimPrefix(host, "["), "]")
	if strings.EqualFold(host, "localhost") {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}

// trustedHost reports whether a console without credentials may answer a
// request with this Host header: a loopback name or address, or any IP
// address (a read-only console may listen on one, and be opened at it).
// What it refuses is a name, such as rebound.evil.example: a page of that
// site whose DNS name is rebound to the console's address (DNS rebinding)
// is, to the browser, of the same origin as the console, and could read
// its pages; but it sends its own name as the Host. An IP address in the
// Host means the browser was pointed at that address itself, an origin
// no other site's page shares.
func trustedHost(host string) bool {
	if loopbackHost(host) {
		return true
	}
	if h, _, err := net.SplitHostPort(host); err == nil {
		host = h
	}
	return net.ParseIP(strings.TrimSuffix(strings.TrimPrefix(host, "["), "]")) != nil
}

// Exposure reports whether a console configured with cfg may listen on
// addr (host:port): an address other machines can reach needs Credentials
// unless the console is ReadOnly, since its actions change messages.
func Exposure(addr string, cfg Config) error {
	if cfg.ReadOnly || cfg.Credentials.set() {
		return nil
	}
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return err
	}
	if host != "" && loopbackHost(host) {
		return nil
	}
	return errors.New("actions are enabled without credentials on an address other machines can reach: " +
		"give a token or a user and password, or add --read-only, or listen on 127.0.0.1")
}
