"""Sans-I/O codecs: framing, JSON-RPC bookkeeping, wire ↔ canonical translation."""
