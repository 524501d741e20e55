"""Persistence: Dataset.save's format and writer, cache, and shuffle spill files."""
