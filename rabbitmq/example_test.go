package rabbitmq_test

import (
	"fmt"
	"os"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/ThreeDotsLabs/watermill/message"

	"github.com/pgbox/pgbox/rabbitmq"
)

// A relay given the publisher publishes a batch's messages in one call and
// waits for their confirms together, each message with its own outcome;
// here PublishResults is called by hand. It needs a RabbitMQ broker
// (scripts/rabbitmq.sh up prints the URL of one), so it has no output to
// check.
func ExamplePublisher_PublishResults() {
	pub, err := rabbitmq.NewPublisher(os.Getenv("RABBITMQ_URL"), []string{"payments"}, watermill.NopLogger{})
	if err != nil {
		fmt.Println(err)
		return
	}
	defer pub.Close()
	// r, _ := relay.New(pool, relay.Config{Publisher: pub})
	msgs := []*message.Message{
		message.NewMessage("0192a8e6-7a50-7c1e-8f3e-000000000001", []byte(`{"order":1}`)),
		message.NewMessage("0192a8e6-7a50-7c1e-8f3e-000000000002", []byte(`{"order":2}`)),
	}
	for i, err := range pub.PublishResults("orders", msgs...) {
		fmt.Println(msgs[i].UUID, err) // nil: confirmed, in the payments queue
	}
}
