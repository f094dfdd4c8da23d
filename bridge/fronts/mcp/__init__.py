"""MCP front: prompts and routes as an MCP server (stdio and Streamable HTTP)."""
