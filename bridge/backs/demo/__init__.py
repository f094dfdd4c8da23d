"""Demo back: the built-in scripted agent."""
