"""Frozen releases and the rolling layer (SPEC sections 8 and 10)."""
