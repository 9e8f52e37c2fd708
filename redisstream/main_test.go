package redisstream_test

import (
	"fmt"
	"os"
	"testing"

	"go.uber.org/goleak"

	"github.com/pgbox/pgbox/internal/brokertest"
	"github.com/pgbox/pgbox/internal/pgtest"
)

// TestMain starts a Redis server for the Examples, which find it by
// REDIS_URL as a user's program would, unless REDIS_URL names one already;
// the tests start their own (internal/brokertest).
func TestMain(m *testing.M) { os.Exit(run(m)) }

func run(m *testing.M) int {
	if os.Getenv("REDIS_URL") == "" {
		url, down, err := brokertest.Up(brokertest.Redis)
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 1
		}
		defer func() {
			if err := down(); err != nil {
				fmt.Fprintln(os.Stderr, "scripts/redis.sh down:", err)
			}
		}()
		os.Setenv("REDIS_URL", url)
	}
	return pgtest.Run(m, subscriberGoroutines...)
}

// subscriberGoroutines are watermill-redisstream's Subscriber's (v1.4.5)
// goroutines that outlive its Close: the reader, which the closing makes
// fail a read, sleeps 500ms after a failed read before it sees that it
// should stop, and only then stops the goroutines it started, which
// Close does not wait for either.
var subscriberGoroutines = []goleak.Option{
	goleak.IgnoreAnyFunction("github.com/ThreeDotsLabs/watermill-redisstream/pkg/redisstream.(*Subscriber).read"),
	goleak.IgnoreAnyFunction("github.com/ThreeDotsLabs/watermill-redisstream/pkg/redisstream.(*Subscriber).claim"),
	goleak.IgnoreAnyFunction("github.com/ThreeDotsLabs/watermill-redisstream/pkg/redisstream.(*Subscriber).checkConsumers"),
}
