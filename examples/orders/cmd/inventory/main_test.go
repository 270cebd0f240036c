package main

import (
	"slices"
	"strings"
	"testing"
)

func TestParseSeeds(t *testing.T) {
	got, err := parseSeeds(" widget=10, gadget=-2 ,")
	if err != nil || !slices.Equal(got, []seed{{"widget", 10}, {"gadget", -2}}) {
		t.Fatalf("parseSeeds: %v, %v", got, err)
	}
	for _, bad := range []string{"widget", "=3", "widget=ten"} {
		if _, err := parseSeeds(bad); err == nil || !strings.Contains(err.Error(), bad) {
			t.Errorf("parseSeeds(%q): %v, want an error naming it", bad, err)
		}
	}
}
