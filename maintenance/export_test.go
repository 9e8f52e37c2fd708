package maintenance

// SetAfterBatch makes m call fn after each delete statement of a
// retention run.
func SetAfterBatch(m *Maintainer, fn func(table string, deleted int64)) { m.hooks.afterBatch = fn }
