"""Delegate compilers: one package per backend turns a partition into a payload."""
