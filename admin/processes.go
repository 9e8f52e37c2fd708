package admin

import (
	"context"
	"time"

	"github.com/pgbox/pgbox"
	"github.com/pgbox/pgbox/internal/ident"
	"github.com/pgbox/pgbox/internal/tables"
)

// ProcessState is what the processes table and River's leader table say
// of a process.
type ProcessState string

// The states of a registered process.
const (
	// ProcessAlive is a process seen within pgbox.ProcessDeadAfter of its
	// heartbeats.
	ProcessAlive ProcessState = "alive"
	// ProcessDead is a process not seen for longer: it was killed, lost
	// its database, or hangs. A process that stops cleanly deletes its row
	// instead.
	ProcessDead ProcessState = "dead"
	// ProcessLeader is a live maintainer that holds River's leadership: the
	// one process that runs the maintenance jobs (retention, scheduled
	// replays).
	ProcessLeader ProcessState = "leader"
)

// Processes is what the processes table holds: the dispatchers, relays and
// maintainers that registered on the schema, and the maintenance leader.
type Processes struct {
	// At is when the snapshot was taken (database time).
	At time.Time `json:"at"`
	// DeadAfter is pgbox.ProcessDeadAfter: how many heartbeats a process
	// may miss before it counts as dead.
	DeadAfter int `json:"dead_after_heartbeats"`
	// Leader is the River client that leads the maintenance jobs, or nil
	// when none does (no maintainer runs, or an election is under way).
	Leader *Leader `json:"leader"`
	// Processes lists every registered process: by kind, then consumer,
	// then name.
	Processes []Process `json:"processes"`
}

// Leader is the maintenance leader, as River's leader table records it.
type Leader struct {
	// ElectedAt is when it became leader.
	ElectedAt time.Time `json:"elected_at"`
	// ExpiresAt is when its leadership ends unless it renews it (it does,
	// while it lives).
	ExpiresAt time.Time `json:"expires_at"`
	// ProcessID is the id of its row in the processes table, or 0 when no
	// registered maintainer has its River id (a maintainer of a pgbox
	// build older than the processes table, say).
	ProcessID int64 `json:"process_id,omitzero"`
	// RiverID is its River client id (river_leader.leader_id).
	RiverID string `json:"river_id"`
}

// Process is one registered dispatcher, relay or maintainer.
type Process struct {
	// Consumer is a dispatcher's consumer; empty for other kinds.
	Consumer string `json:"consumer,omitempty"`
	// ExpiredLeases counts the messages the process claimed whose lease
	// has ended without the process reporting back, and that no other
	// process has taken over yet: a live dispatcher of the consumer (or a
	// live relay) rescues them, one at a time per dispatcher.
	ExpiredLeases int64 `json:"expired_leases"`
	// Heartbeat is how often the process touches its row.
	Heartbeat Duration `json:"heartbeat"`
	// Host is the host it runs on (os.Hostname).
	Host string `json:"host"`
	// ID is its row's id; its claim tokens carry it in their high 32 bits.
	ID int64 `json:"id"`
	// Kind is what it runs.
	Kind pgbox.ProcessKind `json:"kind"`
	// LastSeen is its last heartbeat (database time).
	LastSeen time.Time `json:"last_seen_at"`
	// Leases counts the messages (a dispatcher's inbox messages, a relay's
	// outbox rows) the process claimed under a lease that has not ended:
	// a live process is working on them; a dead one's wait until LeasesEnd.
	Leases int64 `json:"leases"`
	// LeasesEnd is when the last of Leases ends; nil when Leases is 0.
	LeasesEnd *time.Time `json:"leases_end,omitempty"`
	// Name is the name the service gave it (Config.ProcessName), host:pid
	// by default.
	Name string `json:"name"`
	// PID is its operating-system process id on Host.
	PID int `json:"pid"`
	// RiverID is a maintainer's River client id; empty for other kinds.
	RiverID string `json:"river_id,omitempty"`
	// SinceSeen is how long ago LastSeen was.
	SinceSeen Duration `json:"since_seen"`
	// StartedAt is when it registered (database time).
	StartedAt time.Time `json:"started_at"`
	// State says whether it is alive, dead, or the maintenance leader.
	State ProcessState `json:"state"`
	// Version is the pgbox module version it was built with.
	Version string `json:"version"`
}

// The kinds of process as SQL literals.
const (
	dispatcherKindSQL = "'" + string(pgbox.ProcessDispatcher) + "'"
	relayKindSQL      = "'" + string(pgbox.ProcessRelay) + "'"
)

// processesSQL lists the registered processes with their leases. A
// process's claims are the rows whose claim_token carries its id in the
// high 32 bits (package internal/liveness makes the tokens so): a
// dispatcher's among its consumer's running inbox messages, a relay's among
// the running outbox rows, both found through the running rows' partial
// indexes, which hold only the messages in flight. $1 is
// pgbox.ProcessDeadAfter.
var processesSQL = `
SELECT p.id, p.kind, coalesce(p.consumer, ''), p.name, p.host, p.pid, p.version, coalesce(p.river_id, ''),
       p.heartbeat_ms, p.started_at, p.last_seen_at,
       extract(epoch FROM now() - p.last_seen_at)::float8,
       ` + processDeadSQL("$1") + `,
       li.held + lo.held, li.expired + lo.expired, greatest(li.last_end, lo.last_end)
FROM /* schema */processes AS p
CROSS JOIN LATERAL (
    SELECT count(*) FILTER (WHERE i.available_at > now()) AS held,
           count(*) FILTER (WHERE i.available_at <= now()) AS expired,
           max(i.available_at) FILTER (WHERE i.available_at > now()) AS last_end
    FROM /* schema */inbox AS i
    WHERE p.kind = ` + dispatcherKindSQL + ` AND i.consumer = p.consumer
      AND i.status = ` + tables.InboxRunning + ` AND i.claim_token >> 32 = p.id
) AS li
CROSS JOIN LATERAL (
    SELECT count(*) FILTER (WHERE o.available_at > now()) AS held,
           count(*) FILTER (WHERE o.available_at <= now()) AS expired,
           max(o.available_at) FILTER (WHERE o.available_at > now()) AS last_end
    FROM /* schema */outbox AS o
    WHERE p.kind = ` + relayKindSQL + ` AND o.status = ` + tables.OutboxRunning + ` AND o.claim_token >> 32 = p.id
) AS lo
ORDER BY p.kind, p.consumer NULLS FIRST, p.name, p.id`

// leaderSQL reads the time and River's leader, if its leadership has not
// expired. River keeps one row in river_leader (name 'default') while a
// client leads; a leader that died leaves it until it expires.
const leaderSQL = `
SELECT now(), l.leader_id, l.elected_at, l.expires_at
FROM (SELECT) AS x
LEFT JOIN /* schema */river_leader AS l ON l.expires_at >= now()`

// Processes lists the registered dispatchers, relays and maintainers, with
// whether each is alive, dead or the maintenance leader, and the leases a
// process's claims still hold. It reads the small processes table and the
// messages in flight, never the whole inbox.
func (a *Admin) Processes(ctx context.Context) (*Processes, error) {
	res := &Processes{DeadAfter: pgbox.ProcessDeadAfter, Processes: []Process{}}
	var (
		riverID              *string
		electedAt, expiresAt *time.Time
	)
	err := a.pool.QueryRow(ctx, ident.Render(leaderSQL, a.cfg.Schema)).Scan(&res.At, &riverID, &electedAt, &expiresAt)
	if err != nil {
		return nil, a.dbError(ctx, "processes: read the maintenance leader", err)
	}
	res.At = res.At.UTC()
	if riverID != nil {
		res.Leader = &Leader{ElectedAt: electedAt.UTC(), ExpiresAt: expiresAt.UTC(), RiverID: *riverID}
	}

	rows, err := a.pool.Query(ctx, ident.Render(processesSQL, a.cfg.Schema), pgbox.ProcessDeadAfter)
	if err != nil {
		return nil, a.dbError(ctx, "processes", err)
	}
	defer rows.Close()
	for rows.Next() {
		var (
			p           Process
			heartbeatMS int64
			sinceSeen   float64
			dead        bool
		)
		if err := rows.Scan(&p.ID, &p.Kind, &p.Consumer, &p.Name, &p.Host, &p.PID, &p.Version, &p.RiverID,
			&heartbeatMS, &p.StartedAt, &p.LastSeen, &sinceSeen, &dead, &p.Leases, &p.ExpiredLeases, &p.LeasesEnd); err != nil {
			return nil, a.dbError(ctx, "processes", err)
		}
		p.Heartbeat = Duration(time.Duration(heartbeatMS) * time.Millisecond)
		p.SinceSeen = *seconds(&sinceSeen)
		p.StartedAt, p.LastSeen = p.StartedAt.UTC(), p.LastSeen.UTC()
		if p.LeasesEnd != nil {
			end := p.LeasesEnd.UTC()
			p.LeasesEnd = &end
		}
		switch {
		case dead:
			p.State = ProcessDead
		case res.Leader != nil && p.Kind == pgbox.ProcessMaintainer && p.RiverID == res.Leader.RiverID:
			p.State = ProcessLeader
			res.Leader.ProcessID = p.ID
		default:
			p.State = ProcessAlive
		}
		res.Processes = append(res.Processes, p)
	}
	if err := rows.Err(); err != nil {
		return nil, a.dbError(ctx, "processes", err)
	}
	return res, nil
}
