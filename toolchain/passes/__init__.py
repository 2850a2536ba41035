"""Graph passes, one per file; ``toolchain.pipeline.PASSES`` orders them."""
