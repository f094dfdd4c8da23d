"""A2A front: every route as an A2A server at /a2a/{route} (1.0 and 0.3)."""
