package inbox

import "context"

// count adds the outcomes of a receive to the inbox's metrics. Inside a
// caller's transaction (ReceiveTx) they are counted when the statement
// returns, whether or not the transaction later commits.
func (in *Inbox) count(ctx context.Context, results []Result) {
	var accepted, duplicates, conflicts int
	for _, r := range results {
		switch r.Outcome {
		case Accepted:
			accepted++
		case Duplicate:
			duplicates++
		case Conflict:
			conflicts++
		}
	}
	in.tel.Count(ctx, accepted, duplicates, conflicts)
}
