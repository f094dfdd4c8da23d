"""Wire messages per protocol, as msgspec Structs (one module per protocol)."""
