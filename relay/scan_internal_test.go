package relay

import (
	"fmt"
	"testing"
	"unsafe"
)

func TestInternedText(t *testing.T) {
	t.Parallel()
	texts := textInterner{}
	col := texts.column()
	var a, b string
	buf := []byte("order.placed")
	col.dst = &a
	if err := col.ScanBytes(buf); err != nil {
		t.Fatal(err)
	}
	copy(buf, "XXXXX") // the driver reuses its buffer after the call
	col.dst = &b
	if err := col.ScanBytes([]byte("order.placed")); err != nil {
		t.Fatal(err)
	}
	if a != "order.placed" || b != a || unsafe.StringData(a) != unsafe.StringData(b) {
		t.Fatalf("got %q and %q (shared: %v), want one shared %q", a, b, unsafe.StringData(a) == unsafe.StringData(b), "order.placed")
	}
	if err := col.ScanBytes(nil); err == nil {
		t.Fatal("NULL scanned without an error")
	}
	// Past maxInterned distinct values, values are still read, just not kept.
	for i := range maxInterned + 10 {
		want := fmt.Sprint("type-", i)
		if err := col.ScanBytes([]byte(want)); err != nil || b != want {
			t.Fatalf("value %d: got %q (%v), want %q", i, b, err, want)
		}
	}
	if len(texts) != maxInterned {
		t.Fatalf("%d values kept, want at most %d", len(texts), maxInterned)
	}
}
