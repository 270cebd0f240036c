//go:build !race

package sinktest_test

const raceEnabled = false
