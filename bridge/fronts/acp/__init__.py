"""ACP front: the agent side of ACP for editors (stdio, or the daemon's unix socket)."""
