"""Adapters that connect the session runtime to a concrete agent host."""
