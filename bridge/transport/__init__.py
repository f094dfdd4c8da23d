"""trio I/O shared by backs, fronts and prompt sources: process groups, NDJSON connections, HTTP clients."""
