"""Int8 post-training quantization: NEE's PT2E quantizer, calibration, and the fixed-point
parameters TFLite's integer kernels use."""

import logging

# torchao logs a warning per CUDA extension it cannot load on a CPU-only torch, and torch logs
# one about torchao's enum registration: noise for every nee-export --quantize user.
for _name in ("torchao", "torch.utils._pytree"):
    logging.getLogger(_name).setLevel(logging.ERROR)
