package idempotency

import (
	"context"
	"errors"
	"log/slog"
	"net/http"
	"time"

	"github.com/jackc/pgx/v5/pgconn"

	"github.com/pgbox/pgbox/internal/backoff"
	"github.com/pgbox/pgbox/internal/dberr"
)

// The waits between tries of a statement an outage cut: from
// outageWaitFirst, doubling, up to outageWaitMax, with jitter.
const (
	outageWaitFirst = 50 * time.Millisecond
	outageWaitMax   = time.Second
)

// outage is one request's budget for waiting out a database outage
// (Config.OutageRetry): until its end, a statement that an outage cut
// (dberr.Cut) is tried again instead of failing the request.
type outage struct {
	m     *Middleware
	c     *claim        // for the log
	r     *http.Request // its context ends when the client goes away: nobody waits for the answer then
	until time.Time
	tries int
}

// outage returns r's budget, which starts now.
func (m *Middleware) outage(r *http.Request, c *claim) *outage {
	return &outage{m: m, c: c, r: r, until: time.Now().Add(m.cfg.OutageRetry)}
}

// retry runs op, each try on a bookkeeping context of its own, until it
// succeeds, fails for another reason than an outage, or the budget is
// spent; it returns op's last error.
func (o *outage) retry(op func(ctx context.Context) error) error {
	for {
		ctx, cancel := o.m.bookkeepingContext(o.r)
		err := op(ctx)
		cancel()
		if !o.again(err) {
			return err
		}
	}
}

// again reports whether err is an outage that the budget still covers, and
// if so, waits before the caller tries again.
func (o *outage) again(err error) bool {
	if err == nil || !dberr.Cut(err) || o.m.cfg.OutageRetry < 0 {
		return false
	}
	if readOnly(err) {
		// The server was demoted (or is being, as a switchover begins) and
		// every pooled connection to it is useless: new ones find the
		// writable primary (target_session_attrs=read-write).
		o.m.pool.Reset()
	}
	o.tries++
	wait := backoff.Exponential(o.tries, outageWaitFirst, outageWaitMax)
	if time.Until(o.until) < wait {
		return false
	}
	if o.tries == 1 {
		o.m.cfg.Logger.WarnContext(o.r.Context(), "idempotency: the database is unavailable (failover, switchover or restart?); the request waits for it",
			append(o.m.attrs(o.c), slog.Duration("up_to", time.Until(o.until).Round(time.Millisecond)), slog.String("error", err.Error()))...)
	}
	select {
	case <-o.r.Context().Done():
		return false
	case <-time.After(wait):
		return true
	}
}

// readOnly reports whether err is a write refused by a server that is
// read-only: a primary demoted, or about to be.
func readOnly(err error) bool {
	var pgErr *pgconn.PgError
	return errors.As(err, &pgErr) && pgErr.Code == "25006"
}
