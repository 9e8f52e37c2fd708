package health_test

import (
	"context"
	"fmt"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"

	"github.com/jackc/pgx/v5"

	"github.com/pgbox/pgbox/dispatcher"
	"github.com/pgbox/pgbox/health"
	"github.com/pgbox/pgbox/inbox"
	"github.com/pgbox/pgbox/pgboxtest"
)

// A service exposes its health next to its other endpoints: 200 with a
// JSON report while its dispatcher runs and keeps up, 503 once it stops.
func ExampleChecker() {
	ctx := context.Background()
	db, err := pgboxtest.OpenDB(ctx, os.Getenv("DATABASE_URL"), "example_health")
	if err != nil {
		panic(err)
	}
	defer db.Close()

	payments, err := inbox.New(db.Pool, inbox.Config{Consumer: "payments", Schema: db.Schema})
	if err != nil {
		panic(err)
	}
	d, err := dispatcher.New(db.Pool, dispatcher.Config{
		Inbox: payments,
		Handlers: map[string]dispatcher.Handler{
			"OrderPlaced": dispatcher.InTx(func(context.Context, pgx.Tx, *dispatcher.Message) error { return nil }),
		},
		Logger: slog.New(slog.DiscardHandler),
	})
	if err != nil {
		panic(err)
	}
	if err := d.Start(ctx); err != nil {
		panic(err)
	}

	checker, err := health.New(db.Pool, health.Config{Dispatchers: []*dispatcher.Dispatcher{d}, Schema: db.Schema})
	if err != nil {
		panic(err)
	}
	mux := http.NewServeMux()
	mux.Handle("GET /healthz", checker)

	probe := func() {
		rec := httptest.NewRecorder()
		mux.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/healthz", nil))
		fmt.Print(rec.Code, " ", rec.Body.String())
	}
	probe()
	_ = d.Stop(ctx)
	rep := checker.Check(ctx)
	fmt.Println(rep.Healthy(), rep.Checks[2].Name, rep.Checks[2].Error)
	// Output:
	// 200 {
	//   "checks": [
	//     {
	//       "name": "database",
	//       "status": "ok"
	//     },
	//     {
	//       "detail": "version 12",
	//       "name": "schema",
	//       "status": "ok"
	//     },
	//     {
	//       "detail": "running",
	//       "name": "dispatcher payments",
	//       "status": "ok"
	//     },
	//     {
	//       "name": "notifications payments",
	//       "status": "ok"
	//     },
	//     {
	//       "name": "paused payments",
	//       "status": "ok"
	//     },
	//     {
	//       "name": "unavailable payments",
	//       "status": "ok"
	//     },
	//     {
	//       "detail": "0 pending, the oldest due for 0s",
	//       "name": "backlog payments",
	//       "status": "ok"
	//     }
	//   ],
	//   "status": "ok"
	// }
	// false dispatcher payments not running
}
