package runtime

// Stats is a snapshot of a Runtime's counters, for metrics. Reading it is
// cheap (a few atomic loads and one lock) and safe at any time.
type Stats struct {
	// InstancesInUse is the calls holding an instance slot (running, or
	// whose instance is being closed after the call returned); at most
	// Config.MaxInstances.
	InstancesInUse int
	// InstancesPrepared is the instances ready for a call: made ahead of
	// it, or kept after a clean call.
	InstancesPrepared int64
	// InstancesReused counts the instances reset to their snapshot after
	// a clean call and kept for another (see Config.DisablePrepare).
	InstancesReused int64
	// SnapshotBytes is the memory all snapshots hold.
	SnapshotBytes int64
	// Modules is the compiled modules held.
	Modules int
	// Compiles counts Compile calls that succeeded; CompileHits those
	// answered by a module this Runtime had already compiled (the same
	// bytes), PreparedHits those compiled from a prepared module on disk
	// (prepared.go: a warm start skipped agrun's own steps).
	Compiles, CompileHits, PreparedHits int64
	// CompileWorkers sums, over the modules this Runtime compiled (not
	// loaded prepared or from a cache), the goroutines wazero compiled
	// each on: its own compile slot and those (Config.MaxCompiles) free
	// when wazero's compile started, up to GOMAXPROCS.
	CompileWorkers int64
}

// Stats returns the Runtime's counters now.
func (r *Runtime) Stats() Stats {
	r.mu.Lock()
	modules := len(r.modules)
	r.mu.Unlock()
	return Stats{
		InstancesInUse:    len(r.sem),
		InstancesPrepared: r.prepared.Load(),
		InstancesReused:   r.reused.Load(),
		SnapshotBytes:     r.snapshotBytes.Load(),
		Modules:           modules,
		Compiles:          r.compiles.Load(),
		CompileHits:       r.compileHits.Load(),
		PreparedHits:      r.preparedHits.Load(),
		CompileWorkers:    r.compileWorkers.Load(),
	}
}
