// Package maintenance runs pgbox's background upkeep as River periodic jobs,
// so that however many processes run it, each job runs once per interval:
//
//   - retention: done inbox rows older than Config.InboxRetention (the
//     dedupe memory, 7 days by default), published outbox rows older than
//     Config.OutboxRetention, conflict records older than InboxRetention,
//     expired idempotency keys, and the rows of processes not seen for
//     Config.ProcessRetention (a day), each deleted in batches of
//     Config.BatchSize rows, one short statement per batch. Dead, pending,
//     running and discarded messages, and dead or unpublished outbox rows,
//     are never deleted;
//   - scheduled replays (inboxctl replay --at, admin.ScheduleReplay), run
//     once their time has come.
//
// Start a Maintainer in every process of a service, next to its
// dispatchers and relays:
//
//	m, _ := maintenance.New(pool, maintenance.Config{})
//	_ = m.Start(ctx)
//	defer m.Stop(shutdownCtx)
//
// # How it runs
//
// Each Maintainer is a River client on River's tables in pgbox's schema
// (migration 4 installs them). River elects one of the clients leader
// through the river_leader table; only the leader enqueues the periodic
// jobs, one per interval, and whichever client is free works each one. If
// the leader stops or dies, another is elected (at once on a clean stop,
// after River's leadership lease on a crash) and carries on.
//
// Intervals are aligned to the clock (every minute on the minute, say), and
// each job is unique within its interval (River's UniqueOpts.ByPeriod), so
// a new leader that starts by running the jobs at once cannot add a second
// run to an interval the old leader had already run. Every run is a River
// job row: river_job holds, for each, who enqueued it (args.enqueued_by),
// who worked it (attempted_by), and what it did (metadata.output) until
// River's cleaner removes it a day later.
//
// A run works in batches, so it never holds many locks nor runs one long
// statement: dispatchers and relays go on claiming and completing messages
// while it deletes. A run stops after ten minutes (the next interval goes
// on), so River never mistakes a long prune for a stuck job.
//
// Every Maintainer also registers in the schema's processes table, with
// its River client id, so that inboxctl processes (admin.Processes) shows
// which process leads.
//
// River's own tables are pgbox's: give pgbox a schema of its own (the
// default, "pgbox"). A River client of the service's own in the same
// schema would share the leader election, and its leader would not enqueue
// pgbox's jobs.
package maintenance
