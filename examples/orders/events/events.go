// Package events is the contract between the example's services: the topics
// they publish on, the event types they route by, and the payloads they
// carry. In a real system this is the shared schema (protobuf, JSON Schema,
// AsyncAPI) that each team builds against; here it is a Go package that every
// service imports and nothing else.
//
// Payloads are JSON. Each service decodes only what it needs, so adding a
// field never breaks a consumer.
package events

import (
	"encoding/json"
	"fmt"
)

// Topics. The relay publishes an outbox row on its Topic, and the broker
// package maps a topic to a watermill-sql table or a NATS JetStream stream.
const (
	// TopicOrders carries OrderPlaced, from the orders service to payments.
	TopicOrders = "orders"
	// TopicPayments carries PaymentCaptured, from payments to
	// notifications.
	TopicPayments = "payments"
)

// Event types: what a dispatcher routes a stored message by. The relay
// publishes an outbox row's event type in the message metadata, and
// watermillinbox stores it with the message.
const (
	// TypeOrderPlaced is published by the orders service when an order
	// commits.
	TypeOrderPlaced = "OrderPlaced"
	// TypeChargeRequested never crosses the broker: the payments service
	// enqueues it into its own inbox, in the transaction that records the
	// payment, so that the gateway call runs under a lease (see package
	// payments).
	TypeChargeRequested = "ChargeRequested"
	// TypePaymentCaptured is published by the payments service once the
	// gateway has charged the order.
	TypePaymentCaptured = "PaymentCaptured"
)

// OrderPlaced says that an order was accepted and must be paid.
type OrderPlaced struct {
	// Cents is the amount to charge.
	Cents int64 `json:"cents"`
	// Customer is the customer who placed the order.
	Customer string `json:"customer"`
	// Email is where the confirmation goes.
	Email string `json:"email"`
	// OrderID is the order's id, assigned by the orders service: the
	// natural key downstream services dedupe on besides the message id.
	OrderID string `json:"order_id"`
}

// ChargeRequested asks the payments service's leased handler to charge an
// order through the gateway.
type ChargeRequested struct {
	// Cents is the amount to charge.
	Cents int64 `json:"cents"`
	// OrderID is the order to charge.
	OrderID string `json:"order_id"`
}

// PaymentCaptured says that the gateway charged an order.
type PaymentCaptured struct {
	// Cents is the amount charged.
	Cents int64 `json:"cents"`
	// ChargeID is the gateway's id for the charge.
	ChargeID string `json:"charge_id"`
	// Email is where the confirmation goes.
	Email string `json:"email"`
	// OrderID is the order that was paid.
	OrderID string `json:"order_id"`
}

// Encode returns v as the JSON payload of a message.
func Encode(v any) []byte {
	b, err := json.Marshal(v)
	if err != nil {
		// Every event is a plain struct of strings and integers.
		panic(fmt.Sprintf("events: encode %T: %v", v, err))
	}
	return b
}

// Decode parses a message payload into v and checks that it names an
// order: a payload that fails here can never be handled, so handlers
// treat the error as permanent.
func Decode[T OrderPlaced | ChargeRequested | PaymentCaptured](payload []byte) (T, error) {
	var v T
	if err := json.Unmarshal(payload, &v); err != nil {
		return v, fmt.Errorf("payload is not a %T: %w", v, err)
	}
	if orderID(v) == "" {
		return v, fmt.Errorf("payload %T has no order_id", v)
	}
	return v, nil
}

func orderID(v any) string {
	switch e := v.(type) {
	case OrderPlaced:
		return e.OrderID
	case ChargeRequested:
		return e.OrderID
	case PaymentCaptured:
		return e.OrderID
	}
	return ""
}
