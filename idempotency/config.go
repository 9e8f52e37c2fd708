package idempotency

import (
	"cmp"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"strings"
	"time"

	"github.com/pgbox/pgbox"
	"github.com/pgbox/pgbox/internal/ident"
)

const (
	// ExpiryDefault is the default Config.Expiry: a day, longer than any
	// client's retry window is likely to be.
	ExpiryDefault = 24 * time.Hour
	// HandlerTimeoutDefault is the default Config.HandlerTimeout.
	HandlerTimeoutDefault = 30 * time.Second
	// KeyHeaderDefault is the default Config.KeyHeader, the request header
	// field named by the IETF draft "The Idempotency-Key HTTP Header Field".
	KeyHeaderDefault = "Idempotency-Key"
	// MaxKeyBytes is the longest key accepted, in bytes. A UUID is 36.
	MaxKeyBytes = 255
	// MaxRequestBytesDefault is the default Config.MaxRequestBytes: 1 MiB.
	MaxRequestBytesDefault = 1 << 20
	// MethodDefault is the method protected when Config.Methods is empty.
	MethodDefault = http.MethodPost
	// OutageRetryDefault is the default Config.OutageRetry: long enough for
	// a typical managed failover or switchover (RDS Multi-AZ, Cloud SQL HA,
	// Patroni, pg_auto_failover), whose tail is some 15 to 25 seconds.
	OutageRetryDefault = 25 * time.Second
	// RetryAfterDefault is the default Config.RetryAfter.
	RetryAfterDefault = time.Second
)

// defaultReplayHeaders are stored with every response, besides
// Config.ReplayHeaders: the headers that describe the stored bytes (without
// Content-Encoding a gzipped body would replay as garbage) and Location,
// which names what a POST created.
var defaultReplayHeaders = []string{"Content-Encoding", "Content-Language", "Content-Length", "Content-Type", "Location"}

// Config configures a Middleware.
type Config struct {
	// AllowMissingKey, when true, lets a request without a key through to
	// the handler unprotected (as Stripe does): a client that sends a key
	// gets replays, one that does not gets no such guarantee. When false, the
	// default, such a request is refused with 400 and a problem body saying
	// the key is required.
	AllowMissingKey bool

	// Expiry is how long a key is remembered, from the first request that
	// used it (database clock). Until then every retry with the key gets the
	// stored response; after it, the key is new again, and DeleteExpired
	// may delete it. Must exceed Lease. Defaults to ExpiryDefault (24 hours).
	Expiry time.Duration

	// HandlerTimeout bounds the handler: its request context ends after this
	// long. It is shorter than Lease so that a handler that honours its
	// context has stopped before a retry may take its key over. Defaults to
	// HandlerTimeoutDefault (30 seconds).
	HandlerTimeout time.Duration

	// KeyHeader is the request header that carries the key. Its value is a
	// Structured Field string (`"8e03978e-…"`), as the IETF draft says, or
	// the bare key (`8e03978e-…`), as most clients send it: both name the
	// same key. Defaults to KeyHeaderDefault ("Idempotency-Key").
	KeyHeader string

	// Lease is how long a running request holds its key (database clock).
	// Duplicates that arrive meanwhile get 409 with Retry-After. If the
	// request has not answered by then, its process is presumed dead (killed,
	// crashed, cut off) and the next retry takes the key over and runs the
	// handler again; the late request's answer is then not stored, and in
	// WrapTx its writes roll back. Must exceed HandlerTimeout. Defaults to
	// HandlerTimeout plus 30 seconds.
	Lease time.Duration

	// Logger receives storage failures and lost leases at error level.
	// Defaults to slog.Default().
	Logger *slog.Logger

	// MaxRequestBytes is the largest request body accepted. The body is read
	// whole before the handler runs, to fingerprint it; a larger one gets
	// 413. Defaults to MaxRequestBytesDefault (1 MiB); -1 means no limit.
	MaxRequestBytes int64

	// Methods are the request methods that need a key. Requests with other
	// methods (GET, which is idempotent already) go straight to the handler.
	// Defaults to POST only.
	Methods []string

	// OutageRetry is how long a request waits out an outage of the
	// database (a failover or switchover, a restart: connections refused,
	// reset or ended by the server, a primary turned read-only) before it is
	// answered 503: its statements are tried again meanwhile, with a short
	// backoff, so that the client sees a slower answer rather than an error.
	// The wait is counted from the request's arrival, and ends early when the
	// client goes away. Only what is safe is tried again: the key's claim
	// and lookup before the handler runs; with WrapTx, also the whole handler
	// when its transaction was cut before its commit (rolled back, so it
	// runs again from the start, with the same body), and a commit whose
	// outcome was lost is looked up, not run again. With Wrap, a response
	// whose storing the outage cut is still sent as before (see Wrap).
	// Defaults to OutageRetryDefault (25 seconds); -1 (any negative value)
	// answers 503 at the first failure, as a middleware without it would.
	OutageRetry time.Duration

	// ReplayHeaders are response headers stored and replayed besides the
	// defaults, which are Content-Encoding, Content-Language,
	// Content-Length, Content-Type and Location. Other headers reach the
	// first response only. Defaults to none.
	ReplayHeaders []string

	// RetryAfter is what the Retry-After header of a 409 (a request with the
	// same key is still running) tells the client to wait, rounded up to whole
	// seconds. Defaults to RetryAfterDefault (one second).
	RetryAfter time.Duration

	// RouteFunc names the route a request is for. Keys are per route: the
	// same key sent to two routes is two keys. Defaults to the ServeMux
	// pattern that matched the request (http.Request.Pattern, such as
	// "POST /orders/{id}/pay") or, when the middleware wraps the mux itself
	// and no pattern is known yet, the method and path ("POST /orders/17/pay").
	// A name over MaxKeyBytes bytes, or one that PostgreSQL text cannot
	// hold, is stored as its SHA-256.
	RouteFunc func(r *http.Request) string

	// Schema is the PostgreSQL schema holding pgbox's tables. Defaults to
	// pgbox.DefaultSchema.
	Schema string

	// ScopeFunc names the caller a request comes from, such as the
	// authenticated account's id. Keys are per caller: two callers that
	// happen to send the same key do not see each other's responses.
	// Authenticate the request before this middleware runs. Defaults to no
	// scope: every caller of a route shares its keys, so keys must then be
	// unguessable (UUIDs). Long or odd names are hashed as for RouteFunc.
	ScopeFunc func(r *http.Request) string
}

// WithDefaults returns a copy of c with every unset field given its default.
func (c Config) WithDefaults() Config {
	c.Expiry = cmp.Or(c.Expiry, ExpiryDefault)
	c.HandlerTimeout = cmp.Or(c.HandlerTimeout, HandlerTimeoutDefault)
	c.KeyHeader = cmp.Or(c.KeyHeader, KeyHeaderDefault)
	c.Lease = cmp.Or(c.Lease, c.HandlerTimeout+30*time.Second)
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
	c.MaxRequestBytes = cmp.Or(c.MaxRequestBytes, MaxRequestBytesDefault)
	if len(c.Methods) == 0 {
		c.Methods = []string{MethodDefault}
	}
	c.OutageRetry = cmp.Or(c.OutageRetry, OutageRetryDefault)
	c.RetryAfter = cmp.Or(c.RetryAfter, RetryAfterDefault)
	if c.RouteFunc == nil {
		c.RouteFunc = DefaultRoute
	}
	c.Schema = cmp.Or(c.Schema, pgbox.DefaultSchema)
	return c
}

func (c Config) validate() error {
	var problems []string
	add := func(format string, args ...any) { problems = append(problems, fmt.Sprintf(format, args...)) }

	if c.HandlerTimeout <= 0 {
		add("Config.HandlerTimeout is %s: it must be positive", c.HandlerTimeout)
	}
	if c.Lease <= c.HandlerTimeout {
		add("Config.Lease (%s) must exceed Config.HandlerTimeout (%s), or a slow handler could still run when a retry takes its key over", c.Lease, c.HandlerTimeout)
	}
	if c.Expiry <= c.Lease {
		add("Config.Expiry (%s) must exceed Config.Lease (%s), or a key could be forgotten while its request runs", c.Expiry, c.Lease)
	}
	if !isToken(c.KeyHeader) {
		add("Config.KeyHeader %q is not a valid header name", c.KeyHeader)
	}
	if c.MaxRequestBytes < -1 {
		add("Config.MaxRequestBytes is %d: use a positive limit, 0 for the default or -1 for none", c.MaxRequestBytes)
	}
	for i, m := range c.Methods {
		if !isToken(m) {
			add("Config.Methods[%d] %q is not a valid method", i, m)
		}
	}
	for i, h := range c.ReplayHeaders {
		if !isToken(h) {
			add("Config.ReplayHeaders[%d] %q is not a valid header name", i, h)
		}
	}
	if c.RetryAfter < 0 {
		add("Config.RetryAfter is %s: it must be positive", c.RetryAfter)
	}
	if err := ident.ValidateSchema(c.Schema); err != nil {
		add("Config.Schema: %v", err)
	}
	if len(problems) > 0 {
		return errors.New("idempotency: " + strings.Join(problems, "; "))
	}
	return nil
}

// DefaultRoute is the default Config.RouteFunc: the ServeMux pattern that
// matched r, or its method and path when no pattern is known.
func DefaultRoute(r *http.Request) string {
	if r.Pattern != "" {
		return r.Pattern
	}
	return r.Method + " " + r.URL.EscapedPath()
}

// isToken reports whether s is an RFC 9110 token, the syntax of header
// names and methods.
func isToken(s string) bool {
	if s == "" {
		return false
	}
	for i := range len(s) {
		c := s[i]
		switch {
		case 'a' <= c && c <= 'z', 'A' <= c && c <= 'Z', '0' <= c && c <= '9':
		case strings.IndexByte("!#$%&'*+-.^_`|~", c) >= 0:
		default:
			return false
		}
	}
	return true
}
