package console

import (
	"bytes"
	"cmp"
	"embed"
	"fmt"
	"html/template"
	"io/fs"
	"net/http"
	"net/url"
	"path"
	"strings"
	"time"
)

//go:embed templates/*.tmpl
var templateFS embed.FS

//go:embed assets
var assetFS embed.FS

// assetHandler serves the embedded stylesheet and icon.
func assetHandler() http.Handler {
	sub, err := fs.Sub(assetFS, "assets")
	if err != nil {
		panic(err) // the embedded tree always has it
	}
	return http.StripPrefix("/assets/", http.FileServerFS(sub))
}

// pages holds each page's template, parsed with the layout, by name: the
// file's name under templates/ without .tmpl.
type pages map[string]*template.Template

// parsePages parses every page under templates/ with the layout.
func parsePages() (pages, error) {
	files, err := fs.Glob(templateFS, "templates/*.tmpl")
	if err != nil {
		return nil, err
	}
	p := pages{}
	for _, file := range files {
		name := strings.TrimSuffix(path.Base(file), ".tmpl")
		if name == "layout" {
			continue
		}
		t, err := template.New("layout.tmpl").Funcs(funcs).ParseFS(templateFS, "templates/layout.tmpl", file)
		if err != nil {
			return nil, fmt.Errorf("console: template %s: %w", name, err)
		}
		p[name] = t
	}
	return p, nil
}

// view is what the layout needs of every page, and the page's own data.
type view struct {
	// CSRF is the token the page's forms carry.
	CSRF string
	// Data is the page's own.
	Data any
	// DB is the target shown, as URLs name it.
	DB string
	// Nav names the page in the navigation.
	Nav string
	// Now is when the page was made, for relative ages.
	Now time.Time
	// Page is the page's template: the main element's class, page-NAME.
	Page string
	// ReadOnly hides the action forms.
	ReadOnly bool
	// Refresh, if not 0, reloads the page after that many seconds: for
	// work under way.
	Refresh int
	// Targets names every target, for the switcher.
	Targets []*Target
	// Title is the page's title.
	Title string
	// User is who is signed in.
	User string
	// Where says where the target is.
	Where string
}

// render writes page name with v, for target t, answering status. It fills
// in what the layout needs of every page; v brings the page's own.
func (c *Console) render(w http.ResponseWriter, r *http.Request, t *Target, status int, name string, v view) error {
	v.CSRF = c.csrfToken(user(r))
	v.DB = t.Name
	v.Nav = cmp.Or(v.Nav, name)
	v.Now = time.Now().UTC()
	v.Page = name
	v.ReadOnly = c.cfg.ReadOnly
	v.User = user(r)
	v.Where = t.Where
	for i := range c.cfg.Targets {
		v.Targets = append(v.Targets, &c.cfg.Targets[i])
	}
	var buf bytes.Buffer
	if err := c.pages[name].Execute(&buf, v); err != nil {
		return fmt.Errorf("render %s: %w", name, err)
	}
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	w.WriteHeader(status)
	_, err := w.Write(buf.Bytes())
	return err
}

// seeOther sends the browser on to path after an action (Post/Redirect/
// Get), so that reloading the next page does not post the action again.
func seeOther(w http.ResponseWriter, r *http.Request, path string) error {
	http.Redirect(w, r, path, http.StatusSeeOther)
	return nil
}

// link returns path with db and the query pairs kv (name, value, …),
// leaving out values that print as "" or "0" (an unset filter, the first
// page).
func link(db, path string, kv ...any) string {
	q := url.Values{}
	if db != "" {
		q.Set("db", db)
	}
	for i := 0; i+1 < len(kv); i += 2 {
		if v := fmt.Sprint(kv[i+1]); v != "" && v != "0" {
			q.Add(fmt.Sprint(kv[i]), v)
		}
	}
	if len(q) == 0 {
		return path
	}
	return path + "?" + q.Encode()
}
