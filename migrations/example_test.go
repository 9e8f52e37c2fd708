package migrations_test

import (
	"context"
	"fmt"
	"os"

	"github.com/pgbox/pgbox"
	"github.com/pgbox/pgbox/migrations"
	"github.com/pgbox/pgbox/pgboxtest"
)

// A service migrates at start-up; running it again is a cheap no-op, and
// any number of processes may do it at once.
func ExampleMigrate() {
	ctx := context.Background()
	db, err := pgboxtest.OpenDB(ctx, os.Getenv("DATABASE_URL"), "example_migrate")
	if err != nil {
		panic(err)
	}
	defer db.Close()

	for range 2 {
		if err := migrations.Migrate(ctx, db.Pool, migrations.Options{Schema: db.Schema}); err != nil {
			panic(err)
		}
	}
	fmt.Println(pgbox.CheckSchema(ctx, db.Pool, db.Schema))
	// Output:
	// <nil>
}
