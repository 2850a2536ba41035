"""NEE runtime: loads .nee bundles and runs them with numpy (never imports torch)."""

__version__ = "0.1.0"  # the package version (pyproject.toml reads it from here)
