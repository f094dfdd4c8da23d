"""Chat front: the chat event stream on /ws and its REST API under /api/sessions."""
