"""A2A back: a remote A2A agent (1.0 or 0.3, JSON-RPC or HTTP+JSON, SSE)."""
