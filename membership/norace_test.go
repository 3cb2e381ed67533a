//go:build !race

package membership

const raceDetector = false
