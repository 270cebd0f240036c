package main

import (
	"slices"
	"testing"
	"time"
)

// TestSelectedPartsPeers: peers runs only when named, after the parts of all, and all
// keeps its parts.
func TestSelectedPartsPeers(t *testing.T) {
	for spec, want := range map[string][]string{
		"all":           parts,
		"peers":         {"peers"},
		"peers,latency": {"latency", "peers"},
		"all,peers":     append(slices.Clone(parts), "peers"),
	} {
		got, err := selectedParts(spec)
		if err != nil || !slices.Equal(got, want) {
			t.Errorf("selectedParts(%q) = %v, %v; want %v", spec, got, err, want)
		}
	}
}

// TestPeerRuns: the set of one round follows -peers, with the producer alone first and
// the plain loop second (the bases of the report's ratios).
func TestPeerRuns(t *testing.T) {
	var peers []string
	if err := parsePeers("watermill, river", &peers); err != nil {
		t.Fatal(err)
	}
	runs := peerRuns(peers)
	var kinds []peerKind
	for _, r := range runs {
		kinds = append(kinds, r.kind)
	}
	if want := []peerKind{peerAlone, peerLoop, peerRelay, peerWM, peerRiverQ, peerRiverQ}; !slices.Equal(kinds, want) {
		t.Fatalf("kinds %v, want %v", kinds, want)
	}
	if runs[3].fetch != 10*time.Millisecond || runs[4].fetch != 0 || runs[5].fetch != 10*time.Millisecond {
		t.Errorf("poll settings %s, %s, %s; want 10ms, 0 (River's defaults), 10ms", runs[3].fetch, runs[4].fetch, runs[5].fetch)
	}
	if n := len(peerRuns(nil)); n != 3 {
		t.Errorf("no peers: %d configurations, want 3", n)
	}
	if err := parsePeers("kafka", &peers); err == nil {
		t.Error("parsePeers accepted an unknown peer")
	}
}
