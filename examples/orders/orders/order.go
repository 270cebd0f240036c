package orders

import (
	"fmt"
	"strings"
	"time"
	"unicode"
	"unicode/utf8"

	"github.com/google/uuid"
)

// Limits on an order's fields, checked by [Validate].
const (
	MaxCustomerBytes = 200
	MaxSKUBytes      = 64
	MaxQuantity      = 10000
)

// Order is one order. Customer, SKU and Quantity come from the caller; ID and
// CreatedAt are assigned when the order is placed.
type Order struct {
	// ID identifies the order: a UUIDv7, assigned by PlaceOrder when zero.
	ID uuid.UUID `json:"id"`
	// Customer names who ordered: 1 to 200 bytes of UTF-8 without control characters.
	Customer string `json:"customer"`
	// SKU is the stock-keeping unit ordered: 1 to 64 ASCII letters, digits, '-', '_'
	// and '.'.
	SKU string `json:"sku"`
	// Quantity is how many units: 1 to 10000.
	Quantity int `json:"quantity"`
	// CreatedAt is when the database stored the order.
	CreatedAt time.Time `json:"created_at"`
}

// ValidationError says which field of an order is invalid, and why. Field is the
// field's JSON name, the name an API client sent it under.
type ValidationError struct {
	Field  string
	Reason string
}

func (e *ValidationError) Error() string { return e.Field + ": " + e.Reason }

// Validate checks the caller's fields of o (Customer, SKU, Quantity) and returns a
// [*ValidationError] naming the first invalid one, or nil.
func Validate(o Order) error {
	switch {
	case o.Customer == "":
		return &ValidationError{"customer", "must not be empty"}
	case len(o.Customer) > MaxCustomerBytes:
		return &ValidationError{"customer", fmt.Sprintf("must be at most %d bytes, got %d", MaxCustomerBytes, len(o.Customer))}
	case !utf8.ValidString(o.Customer) || strings.IndexFunc(o.Customer, unicode.IsControl) >= 0:
		return &ValidationError{"customer", "must be UTF-8 text without control characters"}
	case o.SKU == "":
		return &ValidationError{"sku", "must not be empty"}
	case len(o.SKU) > MaxSKUBytes:
		return &ValidationError{"sku", fmt.Sprintf("must be at most %d bytes, got %d", MaxSKUBytes, len(o.SKU))}
	case strings.IndexFunc(o.SKU, notSKURune) >= 0:
		return &ValidationError{"sku", "must be ASCII letters, digits, '-', '_' and '.'"}
	case o.Quantity < 1 || o.Quantity > MaxQuantity:
		return &ValidationError{"quantity", fmt.Sprintf("must be between 1 and %d, got %d", MaxQuantity, o.Quantity)}
	}
	return nil
}

func notSKURune(r rune) bool {
	ok := r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '-' || r == '_' || r == '.'
	return !ok
}
