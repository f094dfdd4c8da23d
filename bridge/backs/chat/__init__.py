"""Chat back: a remote chat-event-stream server (WebSocket or Socket.IO)."""
