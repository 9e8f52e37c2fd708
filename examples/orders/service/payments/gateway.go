package payments

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

// gatewayClient calls the payment gateway's API.
type gatewayClient struct {
	http *http.Client
	name string
	url  string
}

func newGatewayClient(url, name string) *gatewayClient {
	return &gatewayClient{http: &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 16}}, name: name, url: url}
}

// charge asks the gateway to charge c under key. The request's context
// bounds the call (the dispatcher's HandlerTimeout). A 5xx, a dropped
// connection or a timeout returns an error to retry: the charge may or may
// not have happened, and only the retry, with the same key, can tell. A 4xx
// other than 408 and 429 can never succeed and is permanent.
func (g *gatewayClient) charge(ctx context.Context, key string, c events.ChargeRequested) (provider.Charge, error) {
	var charge provider.Charge
	body, _ := json.Marshal(provider.ChargeRequest{Cents: c.Cents, OrderID: c.OrderID})
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, g.url+"/v1/charges", bytes.NewReader(body))
	if err != nil {
		return charge, dispatcher.Permanent(err)
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set(provider.IdempotencyKeyHeader, key)
	req.Header.Set("User-Agent", g.name)
	resp, err := g.http.Do(req)
	if err != nil {
		return charge, fmt.Errorf("gateway: %w", err)
	}
	defer resp.Body.Close()
	answer, err := io.ReadAll(io.LimitReader(resp.Body, 64<<10))
	switch {
	case err != nil:
		return charge, fmt.Errorf("gateway: read the answer: %w", err)
	case resp.StatusCode == http.StatusCreated:
		if err := json.Unmarshal(answer, &charge); err != nil {
			return charge, fmt.Errorf("gateway: undecodable answer: %w", err)
		}
		return charge, nil
	case resp.StatusCode >= 500 || resp.StatusCode == http.StatusRequestTimeout || resp.StatusCode == http.StatusTooManyRequests:
		return charge, fmt.Errorf("gateway: %s: %s", resp.Status, bytes.TrimSpace(answer))
	default:
		return charge, dispatcher.Permanent(fmt.Errorf("gateway refused the charge: %s: %s", resp.Status, bytes.TrimSpace(answer)))
	}
}
