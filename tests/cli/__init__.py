"""Tests of the ``pi-cross-session`` command line through real processes."""
