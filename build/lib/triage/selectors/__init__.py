"""Reads: querysets and read models for the API and the board."""
