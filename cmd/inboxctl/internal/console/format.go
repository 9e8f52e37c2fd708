package console

import (
	"fmt"
	"html/template"
	"math"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/pgbox/pgbox/admin"
	"github.com/pgbox/pgbox/cmd/inboxctl/internal/human"
)

// funcs are the templates' helpers.
var funcs = template.FuncMap{
	"ago":      ago,
	"count":    human.Count,
	"describe": describe,
	"dict":     dict,
	"duration": duration,
	"int64":    func(n int) int64 { return int64(n) },
	"iso":      iso,
	"link":     link,
	"list":     func(s ...string) []string { return s },
	"navName":  func(page string) string { return navNames[page] },
	"navPath":  navPath,
	"payload":  renderPayload,
	"percent":  percent,
	"plural":   human.Plural,
	"rate":     rate,
	"short":    func(s string) string { return oneLine(s, errorShown) },
	"spark":    spark,
	"stamp":    stamp,
	"sub":      func(a, b int64) int64 { return a - b },
}

// errorShown is how many characters of an error text or pattern a table
// cell shows ("short"), as inboxctl's tables do: the whole text is on the
// failure group's row, opened, or on the message's own page.
const errorShown = 70

// oneLine makes s fit a table cell as inboxctl's tables cut it: its first
// line only, at most n characters, marked "…" where cut. An error text
// is whatever a handler returned, up to 8 KB of it (NUL bytes spelled
// out, a proxy's whole HTML page): shown in full, one row could push the
// rest of the table, and its buttons, screens away.
func oneLine(s string, n int) string {
	if i := strings.IndexAny(s, "\r\n"); i >= 0 {
		s = s[:i] + " …"
	}
	if utf8.RuneCountInString(s) > n {
		r := []rune(s)
		s = string(r[:n-1]) + "…"
	}
	return s
}

// navNames are the navigation's labels, by page.
var navNames = map[string]string{"overview": "Overview", "failures": "Failures", "messages": "Messages", "outbox": "Outbox",
	"scheduled": "Scheduled", "audit": "Audit log"}

// navPath is the URL path of a page of the navigation.
func navPath(page string) string {
	if page == "overview" {
		return "/"
	}
	return "/" + page
}

// stamp shows a time in UTC to the second; "-" for none. It takes a
// time.Time or a *time.Time.
func stamp(t any) string {
	switch v := t.(type) {
	case time.Time:
		if v.IsZero() {
			return "-"
		}
		return v.UTC().Format("2006-01-02 15:04:05") + " UTC"
	case *time.Time:
		if v == nil {
			return "-"
		}
		return stamp(*v)
	}
	return fmt.Sprint(t)
}

// iso is a time in RFC 3339, UTC, for a time element's datetime. It takes
// a time.Time or a *time.Time.
func iso(t any) string {
	switch v := t.(type) {
	case time.Time:
		return v.UTC().Format(time.RFC3339)
	case *time.Time:
		if v != nil {
			return iso(*v)
		}
	}
	return ""
}

// ago says how long before now t was, or how long after: "4 min ago",
// "in 2 h 5 min"; "" for none. It takes a time.Time or a *time.Time.
func ago(now time.Time, t any) string {
	var at time.Time
	switch v := t.(type) {
	case time.Time:
		at = v
	case *time.Time:
		if v == nil {
			return ""
		}
		at = *v
	}
	if at.IsZero() {
		return ""
	}
	d := now.Sub(at)
	switch {
	case d > -time.Second && d < time.Second:
		return "just now"
	case d < 0:
		return "in " + span(-d)
	}
	return span(d) + " ago"
}

// duration shows an admin.Duration (or a pointer to one, "-" for nil) as
// span does.
func duration(d any) string {
	switch v := d.(type) {
	case admin.Duration:
		return span(time.Duration(v))
	case *admin.Duration:
		if v == nil {
			return "-"
		}
		return span(time.Duration(*v))
	}
	return fmt.Sprint(d)
}

// span shows a duration for someone in a hurry, to two units at most:
// "42 s", "4 min 12 s", "3 h 5 min", "2 d 4 h".
func span(d time.Duration) string {
	d = d.Round(time.Second)
	units := []struct {
		name string
		len  time.Duration
	}{{"d", 24 * time.Hour}, {"h", time.Hour}, {"min", time.Minute}, {"s", time.Second}}
	var parts []string
	for _, u := range units {
		if n := d / u.len; n > 0 || (len(parts) == 0 && u.name == "s") {
			parts = append(parts, fmt.Sprintf("%d %s", n, u.name))
			d -= n * u.len
		}
		if len(parts) == 2 || (len(parts) == 1 && d == 0) {
			break
		}
	}
	return strings.Join(parts, " ")
}

// percent is part of whole in whole percent, at most 100.
func percent(part, whole int64) int64 {
	if whole <= 0 {
		return 0
	}
	return min(100, part*100/whole)
}

// rate shows a rate per second as people give it: "10/s", "30/m",
// "2/h"; "-" for none.
func rate(perSecond float64) string {
	round := func(f float64) string { return strconv.FormatFloat(math.Round(f*100)/100, 'f', -1, 64) }
	switch {
	case perSecond <= 0:
		return "-"
	case perSecond >= 1:
		return round(perSecond) + "/s"
	case perSecond*60 >= 1:
		return round(perSecond*60) + "/min"
	}
	return round(perSecond*3600) + "/h"
}

// shownPayload is a payload as a page shows it.
type shownPayload struct {
	// Kind is one of human's Payload kinds: "JSON", "text", "binary, hex"
	// or "empty".
	Kind string
	// Text is the payload as shown: indented JSON, the text, or a hex dump.
	// The page escapes it, so a payload holding markup shows as text.
	Text string
}

// renderPayload shows a payload as human.Payload describes it.
func renderPayload(p []byte) shownPayload {
	kind, text := human.Payload(p)
	return shownPayload{Kind: kind, Text: text}
}

// describe sums up a filter: "consumer payments, status dead, group
// 3f2a9c1d0b7e"; "every message" for none.
func describe(f admin.Filter) string {
	var parts []string
	add := func(k, v string) {
		if v != "" {
			parts = append(parts, k+" "+v)
		}
	}
	add("consumer", f.Consumer)
	var statuses []string
	for _, s := range f.Statuses {
		statuses = append(statuses, string(s))
	}
	add("status", strings.Join(statuses, " or "))
	add("type", f.EventType)
	add("group", f.Fingerprint)
	add("ordering key", f.OrderingKey)
	if f.ErrorContains != "" {
		add("error containing", strconv.Quote(f.ErrorContains))
	}
	if f.ErrorMatches != "" {
		add("error matching", strconv.Quote(f.ErrorMatches))
	}
	if !f.Since.IsZero() {
		add("received since", stamp(f.Since))
	}
	if !f.Until.IsZero() {
		add("received before", stamp(f.Until))
	}
	switch n := len(f.IDs); {
	case n == 1:
		add("id", f.IDs[0])
	case n > 1:
		add("ids", fmt.Sprintf("%s and %d more", f.IDs[0], n-1))
	}
	if len(parts) == 0 {
		return "every message"
	}
	return strings.Join(parts, ", ")
}

// dict builds a map from pairs (name, value, …), to hand a sub-template
// several values.
func dict(kv ...any) (map[string]any, error) {
	if len(kv)%2 != 0 {
		return nil, fmt.Errorf("dict: %d arguments, want pairs", len(kv))
	}
	m := make(map[string]any, len(kv)/2)
	for i := 0; i < len(kv); i += 2 {
		m[fmt.Sprint(kv[i])] = kv[i+1]
	}
	return m, nil
}
