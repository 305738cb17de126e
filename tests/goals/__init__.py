"""Goal-scoped peer grants at the wire and runtime level (goal-scoped-v1)."""
