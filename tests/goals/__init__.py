"""Goal-scoped peer grants (goal-scoped-v1): the rules, live sessions and the pi-python harness."""
