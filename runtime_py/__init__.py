"""NEE runtime: loads .nee bundles and runs them with numpy (never imports torch)."""
