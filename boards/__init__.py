"""Board recipes (``*.toml``), installed as the package ``toolchain.recipes`` (see
pyproject.toml) so that ``toolchain.boards`` finds them by name from a wheel too."""
