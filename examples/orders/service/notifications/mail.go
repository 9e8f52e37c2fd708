package notifications

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"

	"github.com/pgbox/pgbox/dispatcher"
	"github.com/pgbox/pgbox/examples/orders/events"
	"github.com/pgbox/pgbox/examples/orders/provider"
)

// mailClient calls the mail service's API.
type mailClient struct {
	http *http.Client
	name string
	url  string
}

func newMailClient(url, name string) *mailClient {
	return &mailClient{http: &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 16}}, name: name, url: url}
}

// send emails the confirmation of p under key and returns the mail
// service's id for it. Errors worth retrying (5xx, a dropped connection, a
// timeout) come back as they are; a refusal that can never succeed is
// permanent.
func (c *mailClient) send(ctx context.Context, key string, p events.PaymentCaptured) (string, error) {
	body, _ := json.Marshal(provider.Email{
		OrderID: p.OrderID,
		Subject: "Your order " + p.OrderID + " is paid",
		Text:    fmt.Sprintf("We received %d.%02d for order %s (charge %s). Thank you!", p.Cents/100, p.Cents%100, p.OrderID, p.ChargeID),
		To:      p.Email,
	})
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, c.url+"/v1/messages", bytes.NewReader(body))
	if err != nil {
		return "", dispatcher.Permanent(err)
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set(provider.IdempotencyKeyHeader, key)
	req.Header.Set("User-Agent", c.name)
	resp, err := c.http.Do(req)
	if err != nil {
		return "", fmt.Errorf("mail: %w", err)
	}
	defer resp.Body.Close()
	answer, err := io.ReadAll(io.LimitReader(resp.Body, 64<<10))
	switch {
	case err != nil:
		return "", fmt.Errorf("mail: read the answer: %w", err)
	case resp.StatusCode == http.StatusCreated:
		var q provider.Queued
		if err := json.Unmarshal(answer, &q); err != nil {
			return "", fmt.Errorf("mail: undecodable answer: %w", err)
		}
		return q.ID, nil
	case resp.StatusCode >= 500 || resp.StatusCode == http.StatusRequestTimeout || resp.StatusCode == http.StatusTooManyRequests:
		return "", fmt.Errorf("mail: %s: %s", resp.Status, bytes.TrimSpace(answer))
	default:
		return "", dispatcher.Permanent(fmt.Errorf("mail service refused the email: %s: %s", resp.Status, bytes.TrimSpace(answer)))
	}
}
