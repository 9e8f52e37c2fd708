// Package partition keeps the inbox's and the outbox's partitions
// (migration 9): which partition a message id belongs in, and the changes
// the maintenance job makes to them.
//
// A row's bucket, the partition key, is a function of its id (and, for an
// inbox message dated by its IDTime, of that time, which every delivery of
// the id carries), so that every delivery of an id meets the first one in
// one partition's primary key. A UUIDv7 id made on the table's origin day
// or later is dated: its bucket is that Day, its partition the day's
// (DayPartition) or, while the day has none, the default one. So is an
// inbox message whose id is no UUIDv7 but which carries an IDTime of the
// origin day or later (a dated foreign id, inbox.Message.IDTime): by the
// IDTime's day. Any other id is undated: in the inbox, bucket -g of the
// generation g current when it first arrived (GenerationPartition); in the
// outbox, 0 (Undated). IDDay and UUIDDay compute an id's day in Go, as the
// hot paths need it.
//
// Maintain, run by package maintenance on River's leader (and by the
// migrator, CreateOnly), creates day partitions ahead (CreateDay), starts
// inbox generations (StartGeneration) and drops expired partitions
// (Drop), each in a transaction with a lock timeout of its own: a change
// whose locks are not granted in time returns ErrLockTimeout, and Maintain
// postpones it to its next run. docs/design.md, "Partitions", gives the
// measurements behind this layout and the lock protocol that keeps dedupe
// exact while generations change.
package partition
