package bench

import (
	"fmt"
	"strconv"
)

// twoRelays names the relay-scaling system of two relays at once.
const twoRelays = "2 relays × 2 workers" // relay.WorkersDefault each

// relayScaling is the relay-scaling case through the publisher newPub
// makes: a system per worker count of the chart (Config.SweepWorkers),
// then two relays of the default workers.
func (e *env) relayScaling(broker string, newPub newPublisher) benchCase {
	n := e.cfg.SweepBacklog
	var systems []system
	for _, w := range e.cfg.SweepWorkers {
		systems = append(systems, system{workersName(w), e.relayDrain(n, newPub, relayShape{workers: w})})
	}
	systems = append(systems, system{twoRelays, e.relayDrain(n, newPub, relayShape{relays: 2})})
	return benchCase{scenario: "relay-scaling", setting: fmt.Sprintf("%d rows → %s", n, broker), main: "msgs/s", higherBetter: true, systems: systems}
}

// workersName names the relay-scaling system of w workers.
func workersName(w int) string {
	if w == 1 {
		return "1 worker"
	}
	return strconv.Itoa(w) + " workers"
}
