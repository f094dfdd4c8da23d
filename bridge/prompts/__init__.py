"""Prompts as slash commands: MCP prompt sources and templates written in the config.

- `config`: `[prompts.NAME]` templates, `[[prompt_sources]]`, `[mcp]` (part of `Config`).
- `text`: command names and clashes, hints, argument parsing, templates, splicing (no I/O).
- `registry`: `PromptRegistry`, one per `SessionManager`: runs the sources in its
  nursery, keeps each route's commands and tells listeners when they change; resolves
  and expands `/name args` before a turn reaches the back.
- `mcp_source`: one MCP server as a source (the `mcp` SDK, imported only when a
  configured source needs it).

Nothing here is imported by this package's `__init__`, so `bridge.config` can use
`bridge.prompts.config` without loading the rest.
"""
