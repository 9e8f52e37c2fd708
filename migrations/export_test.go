package migrations

// PGBoxTables exposes the tables Up checks for, so that a test can hold the
// list to what the migrations create.
var PGBoxTables = pgboxTables

// ParseMigration exposes the file splitter to the tests.
func ParseMigration(name, body string) (up, down string, err error) {
	m, err := parseMigration(name, body)
	return m.up, m.down, err
}

// LockID exposes the migration lock's key, to look for it in pg_locks.
var LockID = lockID
