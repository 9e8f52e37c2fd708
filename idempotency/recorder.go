package idempotency

import (
	"bytes"
	"encoding/json"
	"net/http"
	"strconv"
	"strings"
	"unicode/utf8"
)

// recorder is the http.ResponseWriter a protected handler writes to. It
// buffers the whole response: nothing reaches the client until the response
// is stored (and, in WrapTx, committed), so a client never sees an answer
// that a failed commit then takes back.
//
// It deliberately implements neither http.Flusher nor http.Hijacker, and has
// no Unwrap: a streamed or hijacked response cannot be replayed, and
// http.ResponseController must not reach past the buffer to the client.
type recorder struct {
	body        bytes.Buffer
	header      http.Header
	status      int
	wroteHeader bool
}

func newRecorder() *recorder { return &recorder{header: http.Header{}} }

// Header returns the response headers the handler is building.
func (rec *recorder) Header() http.Header { return rec.header }

// WriteHeader records the status. Informational (1xx) statuses are dropped:
// they cannot be replayed, and the client gets the final status in due
// course.
func (rec *recorder) WriteHeader(status int) {
	if rec.wroteHeader || (status >= 100 && status < 200) {
		return
	}
	rec.status = status
	rec.wroteHeader = true
}

// Write appends to the buffered body.
func (rec *recorder) Write(p []byte) (int, error) {
	if !rec.wroteHeader {
		rec.WriteHeader(http.StatusOK)
	}
	return rec.body.Write(p)
}

// response is a complete response, as the handler wrote it or as stored.
type response struct {
	body   []byte
	header http.Header
	status int
}

// finish returns the handler's response, completed the way net/http would
// complete it: status 200 when none was written, a sniffed Content-Type
// when the handler set none, and a Content-Length. Doing this before
// storing makes the replay carry exactly the headers the first response did.
func (rec *recorder) finish() response {
	res := response{body: rec.body.Bytes(), header: rec.header, status: rec.status}
	if !rec.wroteHeader {
		res.status = http.StatusOK
	}
	if bodyAllowed(res.status) {
		if _, set := res.header["Content-Type"]; !set && len(res.body) > 0 {
			res.header.Set("Content-Type", http.DetectContentType(res.body))
		}
		if res.header.Get("Content-Length") == "" {
			res.header.Set("Content-Length", strconv.Itoa(len(res.body)))
		}
	}
	return res
}

// final reports whether a response is the request's final answer, to be
// stored and replayed (and, in WrapTx, committed). A 5xx, a 408 Request
// Timeout or a 429 Too Many Requests says "try again", so it is not stored:
// the key is released and the retry runs the handler afresh.
func final(status int) bool {
	return status < 500 && status != http.StatusRequestTimeout && status != http.StatusTooManyRequests
}

// bodyAllowed reports whether a response with status may have a body
// (RFC 9110: not 1xx, 204 or 304).
func bodyAllowed(status int) bool {
	return status >= 200 && status != http.StatusNoContent && status != http.StatusNotModified
}

// stored returns the headers of res to store: those on the allow-list, as
// JSON text. (Text, not []byte: pgx sends a []byte as bytea unless it knows
// the parameter is jsonb, which the exec and simple_protocol query modes
// never tell it.) A header value that is not valid UTF-8, or holds a NUL, cannot
// round-trip through jsonb and is left out, with its name returned in
// skipped for the log.
func (res response) stored(allow []string) (headers string, skipped []string) {
	out := make(map[string][]string, len(allow))
	for _, name := range allow {
		values := res.header.Values(name)
		if len(values) == 0 {
			continue
		}
		ok := true
		for _, v := range values {
			ok = ok && utf8.ValidString(v) && !strings.ContainsRune(v, 0)
		}
		if !ok {
			skipped = append(skipped, name)
			continue
		}
		out[http.CanonicalHeaderKey(name)] = values
	}
	b, err := json.Marshal(out)
	if err != nil {
		panic(err) // valid UTF-8 strings always encode
	}
	return string(b), skipped
}

// write sends res to the client, adding its headers to any that outer
// middleware set already.
func (res response) write(w http.ResponseWriter, extra ...string) {
	h := w.Header()
	for name, values := range res.header {
		h[name] = values
	}
	for i := 0; i+1 < len(extra); i += 2 {
		h.Set(extra[i], extra[i+1])
	}
	w.WriteHeader(res.status)
	if bodyAllowed(res.status) {
		_, _ = w.Write(res.body)
	}
}
