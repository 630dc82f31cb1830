package main

import "flag"

// workerFlags are `agrun worker`'s flags, defined in every build so that
// its help is the same with and without cluster support.
type workerFlags struct {
	queues      *string
	concurrency *int
	identity    *string
}

func defineWorkerFlags(fs *flag.FlagSet) workerFlags {
	return workerFlags{
		queues:      fs.String("queues", "llm,wasm,mcp", "serve these activity `QUEUES` (comma-separated: llm, wasm, mcp)"),
		concurrency: fs.Int("concurrency", 0, "run at most `N` activities at once per queue, and N local calls per queue (default: [sandbox] max_parallel, else 8)"),
		identity:    fs.String("identity", "", "the worker's `NAME` in Temporal (default: pid@host)"),
	}
}
