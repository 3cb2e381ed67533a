//go:build race

package membership

// raceDetector: the race detector slows memberlist many times over, so
// the scale test runs fewer members under it.
const raceDetector = true
