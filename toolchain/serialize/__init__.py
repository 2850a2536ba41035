"""Serialize: an exported program to one .nee file (flatbuffer + aligned constant segments)."""
