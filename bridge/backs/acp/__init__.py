"""ACP back: an agent subprocess spoken to over ACP (JSON-RPC on stdio)."""
