package orders

import (
	"time"

	"github.com/google/uuid"
)

// The event contract: what PlaceOrder enqueues and consumers read.
const (
	// AggregateType is the aggregate type of every order event.
	AggregateType = "order"
	// EventOrderPlaced is the event type of [OrderPlaced], schema version 1.
	EventOrderPlaced = "order.placed"
	// OrderPlacedVersion is the aggregate version of an OrderPlaced event: the order's
	// first. Later events of an order (paid, shipped) would carry 2, 3, …, so a
	// consumer's inbox applies them in order.
	OrderPlacedVersion = 1
)

// OrderPlaced is the JSON payload of an order.placed event. Its aggregate id is the
// order id.
type OrderPlaced struct {
	OrderID  uuid.UUID `json:"order_id"`
	Customer string    `json:"customer"`
	SKU      string    `json:"sku"`
	Quantity int       `json:"quantity"`
	PlacedAt time.Time `json:"placed_at"`
}
