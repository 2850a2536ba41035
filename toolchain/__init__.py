"""NEE toolchain: PyTorch nn.Module -> .nee bundle."""

from runtime_py import __version__

__all__ = ["__version__"]
