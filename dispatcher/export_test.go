package dispatcher

// SetAfterClaimHook makes d call fn between each claim's commit and its
// handlers: the window in which a paused worker can lose its claim. Set it
// before Start.
func SetAfterClaimHook(d *Dispatcher, fn func(ids []string)) { d.hooks.afterClaim = fn }
