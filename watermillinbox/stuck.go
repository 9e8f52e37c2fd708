package watermillinbox

import (
	"errors"
	"log/slog"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/ThreeDotsLabs/watermill/message"
)

// stuckRemindEvery is how long after a cause of stuck messages was logged
// it is logged again, should it recur.
const stuckRemindEvery = time.Hour

// stuckCausesMax bounds how many causes a handler remembers.
const stuckCausesMax = 1000

// stuckCauses remembers when each cause of a message nacked for good was
// last logged: a nacked message comes back at once, and on Kafka for ever
// (its partition redelivers it and nothing behind it), so logging each
// redelivery would bury the one line that matters.
type stuckCauses struct {
	mu   sync.Mutex
	last map[string]time.Time
}

// first reports whether cause is to be logged at now: it was not logged
// within stuckRemindEvery.
func (s *stuckCauses) first(cause string, now time.Time) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if at, ok := s.last[cause]; ok && now.Sub(at) < stuckRemindEvery {
		return false
	}
	if len(s.last) >= stuckCausesMax {
		for c, at := range s.last {
			if now.Sub(at) >= stuckRemindEvery {
				delete(s.last, c)
			}
		}
		if len(s.last) >= stuckCausesMax {
			clear(s.last) // causes logged again rather than memory without bound
		}
	}
	s.last[cause] = now
	return true
}

// cause is what err, the error of a message that can never be stored
// under dedupe key id, says is wrong with it, whichever message it is:
// the error without the id. Messages missing the same header, or all those
// of a producer that sets no id, share one cause.
func cause(err error, id string) string {
	if id == "" {
		return err.Error()
	}
	return strings.Replace(err.Error(), " "+strconv.Quote(id), "", 1)
}

// logStuck says that m, which can never be stored because of err, was
// nacked, what that does, and what to do.
func logStuck(cfg Config, m *message.Message, err error) {
	fix := "fix what the error names, at the producer or in this handler's watermillinbox.Config"
	if errors.Is(err, errNoKey) {
		fix = "give watermillinbox.Config.IDFunc a key every message of this topic carries: a header (MetadataID) or a payload field (PayloadID)"
	}
	cfg.Logger.ErrorContext(m.Context(), "watermillinbox: a message that can never be stored is nacked, so the broker redelivers it for ever, "+
		"and on Kafka nothing behind it on its partition is consumed. To fix it, "+fix+"; and set Config.PoisonPublisher and Config.PoisonTopic, "+
		"so that such a message is moved aside, with its reason, and the messages behind it flow on. Logged once per cause (again each hour it recurs), "+
		"not per redelivery",
		slog.String("consumer", cfg.Inbox.Consumer()), slog.String("topic", message.SubscribeTopicFromCtx(m.Context())),
		slog.String("watermill_uuid", m.UUID), slog.String("error", err.Error()))
}
