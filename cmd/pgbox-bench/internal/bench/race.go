//go:build race

package bench

// raceDetector reports whether the race detector is built in (go test
// -race): see raceLeftOut.
const raceDetector = true
