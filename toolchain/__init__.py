"""NEE toolchain: PyTorch nn.Module -> .nee bundle."""

__version__ = "0.1.0"
