package bench

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"time"
)

// consoleBuild is the inboxctl binary the console cases serve pages with:
// built once per bench run, from this checkout. The console lives in an
// internal package of cmd/inboxctl, which the bench cannot import, and a
// page is only measured honestly as a browser gets it: over HTTP from
// inboxctl serve.
type consoleBuild struct {
	once sync.Once
	path string
	err  error
}

// binary builds inboxctl, once, and returns its path.
func (b *consoleBuild) binary(ctx context.Context) (string, error) {
	b.once.Do(func() {
		// Built under a name of this process's, then renamed, so that two
		// bench runs at once (make test's smoke run and a real one) never
		// start a half-written binary.
		b.path = filepath.Join(os.TempDir(), "pgbox-bench-inboxctl")
		tmp := b.path + "." + strconv.Itoa(os.Getpid())
		out, err := exec.CommandContext(ctx, "go", "build", "-o", tmp, "github.com/pgbox/pgbox/cmd/inboxctl").CombinedOutput()
		if err != nil {
			b.err = fmt.Errorf("build inboxctl for the console cases: %w: %s", err, out)
			return
		}
		b.err = os.Rename(tmp, b.path)
	})
	return b.path, b.err
}

// consolePage is one page the console cases time: a GET of path, or a
// POST of form (the replay's first step: its dry run, which changes
// nothing). {group}, {consumer} and {id} in either stand for the operator
// schema's largest failure group, its first consumer and a done message
// of that consumer.
type consolePage struct {
	name, path string
	form       url.Values
}

// consolePages are the console's pages, as the on-call path reads them.
var consolePages = []consolePage{
	{name: "overview", path: "/"},
	{name: "failures", path: "/failures"},
	{name: "group's messages", path: "/messages?consumer=payments&group={group}"},
	{name: "dead messages", path: "/messages?status=dead"},
	{name: "failed messages (the default list)", path: "/messages"},
	{name: "message", path: "/message?consumer={consumer}&id={id}"},
	{name: "replay confirmation (dry run)", path: "/replay", form: url.Values{"scope": {"all"}, "consumer": {"payments"}, "group": {"{group}"}}},
	{name: "outbox", path: "/outbox"},
	{name: "scheduled", path: "/scheduled"},
	{name: "audit", path: "/audit"},
}

// consoleCases times each page of inboxctl serve on the operator
// scenario's inbox (its schema, filled once and shared): the request as a
// browser makes it, after one untimed request of the same page, so that
// the figure is the page and not the first connections of the console's
// pool.
func (e *env) consoleCases() []benchCase {
	st, build := e.operator, &consoleBuild{}
	var cs []benchCase
	for _, p := range consolePages {
		method := "GET " + p.path
		if p.form != nil {
			method = "POST " + p.path
		}
		cs = append(cs, benchCase{scenario: "operator", main: "ms",
			setting: fmt.Sprintf("console: %s (%s), %s done", p.name, strings.SplitN(method, "?", 2)[0], millions(e.cfg.OperatorRows)),
			systems: []system{{"pgbox", e.consolePage(st, build, p)}}})
	}
	return cs
}

// csrfField finds a page's CSRF token.
var csrfField = regexp.MustCompile(`name="csrf" value="([^"]+)"`)

// consolePage returns a run that serves the console on the operator
// schema and times one request of p.
func (e *env) consolePage(st *operatorState, build *consoleBuild, p consolePage) runFunc {
	return func(ctx context.Context, _ scale) (Figures, error) {
		pool, _, err := newPool(ctx, e.cfg.URL, 2)
		if err != nil {
			return nil, err
		}
		st.once.Do(func() { st.err = e.operatorFill(ctx, pool, st) })
		pool.Close()
		if st.err != nil {
			return nil, st.err
		}
		bin, err := build.binary(ctx)
		if err != nil {
			return nil, err
		}
		base, stop, err := e.serveConsole(ctx, bin)
		if err != nil {
			return nil, err
		}
		defer stop()
		fill := strings.NewReplacer("{group}", st.group, "{id}", st.id, "{consumer}", retainedConsumers[0])
		var form url.Values
		if p.form != nil { // the replay's first step, with the CSRF token of the page it comes from
			page, err := get(ctx, base+"/failures")
			if err != nil {
				return nil, err
			}
			token := csrfField.FindStringSubmatch(page)
			if token == nil {
				return nil, errors.New("console: the failures page has no CSRF token")
			}
			form = url.Values{"csrf": {token[1]}}
			for k, vs := range p.form {
				form[k] = []string{fill.Replace(vs[0])}
			}
		}
		request := func() error {
			if form == nil {
				return fetch(ctx, http.MethodGet, base+fill.Replace(p.path), nil)
			}
			return fetch(ctx, http.MethodPost, base+p.path, form)
		}
		if err := request(); err != nil { // warm the console's pool
			return nil, err
		}
		start := time.Now()
		if err := request(); err != nil {
			return nil, err
		}
		return Figures{"ms": float64(time.Since(start).Microseconds()) / 1000}, nil
	}
}

// serveConsole starts inboxctl serve on the operator schema, on a free
// loopback port, and returns its base URL and how to stop it.
func (e *env) serveConsole(ctx context.Context, bin string) (string, func(), error) {
	cmd := exec.CommandContext(ctx, bin, "serve", "--addr", "127.0.0.1:0", "--schema", e.operatorSchema())
	cmd.Env = append(os.Environ(), "DATABASE_URL="+e.cfg.URL)
	out, err := cmd.StdoutPipe()
	if err != nil {
		return "", nil, err
	}
	if err := cmd.Start(); err != nil {
		return "", nil, err
	}
	stop := func() {
		_ = cmd.Process.Signal(os.Interrupt)
		_ = cmd.Wait()
	}
	line, err := bufio.NewReader(out).ReadString('\n')
	m := regexp.MustCompile(`(http://\S+)/ `).FindStringSubmatch(line)
	if err != nil || m == nil {
		stop()
		return "", nil, fmt.Errorf("inboxctl serve did not start (%q): %v", line, err)
	}
	go func() { _, _ = io.Copy(io.Discard, out) }()
	return m[1], stop, nil
}

// fetch sends one request, with form as its body when not nil, and fails
// unless the page answers 200.
func fetch(ctx context.Context, method, u string, form url.Values) error {
	_, err := send(ctx, method, u, form)
	return err
}

// get returns a page's body.
func get(ctx context.Context, u string) (string, error) {
	return send(ctx, http.MethodGet, u, nil)
}

// send sends one request and returns the body of a 200 answer.
func send(ctx context.Context, method, u string, form url.Values) (string, error) {
	var body io.Reader
	if form != nil {
		body = strings.NewReader(form.Encode())
	}
	req, err := http.NewRequestWithContext(ctx, method, u, body)
	if err != nil {
		return "", err
	}
	if form != nil {
		req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return "", err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		return "", err
	}
	if resp.StatusCode != http.StatusOK {
		return "", fmt.Errorf("console: %s %s: %s: %.300s", method, u, resp.Status, b)
	}
	return string(b), nil
}
