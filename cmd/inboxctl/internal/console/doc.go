// Package console is inboxctl's web console (inboxctl serve): an
// http.Handler that shows what pgbox's inbox and outbox hold and lets an
// on-call engineer replay, discard and retry from a browser, over the same
// package admin calls as the command line, with the same audit records.
//
// # Pages
//
// The overview (per consumer: fresh, retrying, scheduled, running, dead,
// discarded, the oldest pending message's age and the last hour's
// throughput; the outbox backlog; live processes and the maintenance
// leader), failures grouped by fingerprint with their trend, a group's or
// any selection's messages (paged by arrival, filterable), one message in
// full, the outbox, scheduled replays with their progress, background
// actions started here, and the audit log. Several databases and schemas
// (Targets) are served at once, with a switcher.
//
// Pages are rendered on the server with html/template from templates and
// a stylesheet embedded in the binary. There is no JavaScript: forms post,
// pages that show work under way or what on-call watches (the overview,
// failures, a background action, scheduled replays) and the error page
// of a GET that failed on the server's side refresh themselves with a
// meta refresh, and the Content-Security-Policy forbids scripts
// outright, so a payload or an error text holding markup can only ever
// show as text.
//
// # Actions
//
// Replay and discard (a failure group, the messages a filter matches, or a
// selection), a scheduled or throttled replay, cancelling a scheduled
// replay, and retrying dead outbox rows. Every one takes two steps: the
// first shows what it would change (the dry-run count and the newest
// messages) and changes nothing; the second, an explicit confirmation,
// acts. Immediate bulk changes run in the background in bounded batches
// (admin's), with their progress on a page of their own, and stop between
// two batches when the console is closed; scheduled and
// throttled replays are run by package maintenance in the service, and
// their progress is read from their records.
//
// # Security
//
// With Credentials set, every request needs them (HTTP basic auth, or a
// bearer token), compared in constant time, and the audit log records the
// user they name, from the request's remote address. Every state-changing
// request must be a POST that carries the page's CSRF token and passes
// net/http's cross-origin protection (Sec-Fetch-Site and Origin). ReadOnly
// refuses every action. Without credentials, every request must name
// localhost or an IP address as its Host, and an action a loopback one,
// which defeats DNS rebinding; Exposure says whether a listening address
// may go without them. Logs name requests
// and targets, never payloads or connection strings.
package console
