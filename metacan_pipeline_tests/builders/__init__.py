"""Builders shared by several test files, one module per stage (fixtures live in conftest.py). Test files import
from these modules, never from one another."""
