//go:build race

package sinktest_test

const raceEnabled = true
