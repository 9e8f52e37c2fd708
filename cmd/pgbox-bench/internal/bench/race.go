//go:build race

package bench

// raceDetector reports whether the race detector is built in (go test
// -race): see cases, which leaves out a case it would fail for a race in
// a library rather than in pgbox.
const raceDetector = true
