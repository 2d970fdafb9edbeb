//go:build race

package sgd_test

const raceEnabled = true
