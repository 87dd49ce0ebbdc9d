"""Frozen releases and the rolling layer (issue 16 "Releases", SPEC sections 8 and 10)."""
