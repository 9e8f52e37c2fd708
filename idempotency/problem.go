package idempotency

import (
	"encoding/json"
	"net/http"
	"strconv"
	"time"
)

// ProblemContentType is the media type of the middleware's own error
// responses: RFC 9457 problem details.
const ProblemContentType = "application/problem+json"

// problemTypeBase prefixes each problem's type URI: the section of the
// documentation that explains it.
const problemTypeBase = "https://github.com/pgbox/pgbox/blob/main/docs/idempotency.md#"

// Problem is the body of an error response the middleware answers itself,
// in the RFC 9457 "problem details" format, sent as ProblemContentType.
type Problem struct {
	// Detail says what happened to this request and what the client should
	// do next.
	Detail string `json:"detail"`
	// Status is the HTTP status code, repeated for clients that log bodies.
	Status int `json:"status"`
	// Title summarises the problem type; it is the same for every
	// occurrence.
	Title string `json:"title"`
	// Type is a URI naming the problem type; it leads to the documentation
	// of the problem.
	Type string `json:"type"`
}

// The problems the middleware answers. Titles follow the IETF draft's
// examples where it has one.
var (
	problemKeyMissing = Problem{
		Status: http.StatusBadRequest,
		Title:  "Idempotency-Key is missing",
		Type:   problemTypeBase + "key-missing",
	}
	problemKeyInvalid = Problem{
		Status: http.StatusBadRequest,
		Title:  "Idempotency-Key is invalid",
		Type:   problemTypeBase + "key-invalid",
	}
	problemKeyReused = Problem{
		Status: http.StatusUnprocessableEntity,
		Title:  "Idempotency-Key is already used",
		Type:   problemTypeBase + "key-reused",
	}
	problemInProgress = Problem{
		Status: http.StatusConflict,
		Title:  "A request is outstanding for this Idempotency-Key",
		Type:   problemTypeBase + "in-progress",
	}
	problemBodyTooLarge = Problem{
		Status: http.StatusRequestEntityTooLarge,
		Title:  "Request body is too large",
		Type:   problemTypeBase + "body-too-large",
	}
	problemBodyUnreadable = Problem{
		Status: http.StatusBadRequest,
		Title:  "Request body could not be read",
		Type:   problemTypeBase + "body-unreadable",
	}
	problemUnavailable = Problem{
		Status: http.StatusServiceUnavailable,
		Title:  "Idempotency keys are unavailable",
		Type:   problemTypeBase + "unavailable",
	}
	problemNotCommitted = Problem{
		Status: http.StatusInternalServerError,
		Title:  "The request was not committed",
		Type:   problemTypeBase + "not-committed",
	}
)

// with returns a copy of p with its detail set.
func (p Problem) with(detail string) Problem {
	p.Detail = detail
	return p
}

// writeProblem answers the request with p. retryAfter, when positive, is
// sent as Retry-After in whole seconds, rounded up.
func writeProblem(w http.ResponseWriter, p Problem, retryAfter time.Duration) {
	body, err := json.Marshal(p)
	if err != nil {
		panic(err) // four strings and an int always encode
	}
	h := w.Header()
	h.Set("Content-Type", ProblemContentType)
	h.Set("Content-Length", strconv.Itoa(len(body)))
	h.Set("Cache-Control", "no-store")
	if retryAfter > 0 {
		h.Set("Retry-After", strconv.FormatInt(int64((retryAfter+time.Second-1)/time.Second), 10))
	}
	w.WriteHeader(p.Status)
	_, _ = w.Write(body)
}
