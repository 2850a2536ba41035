"""The runtime never imports torch: load and run a bundle in a fresh interpreter."""

from __future__ import annotations

import subprocess
import sys

import numpy as np

SCRIPT = """
import sys
import numpy as np
from runtime_py.program import Program
program = Program.load(sys.argv[1])
out = program.run(*[np.load(p) for p in sys.argv[2:]])
np.save(sys.argv[1] + ".out.npy", out[0])
banned = sorted(m for m in sys.modules if m.split(".")[0] in {"torch", "toolchain", "scipy"})
assert not banned, banned
print("ok")
"""


def test_runtime_runs_without_torch(exported, tmp_path):
    ex = exported("cnn")
    paths = []
    for i, x in enumerate(ex.inputs):
        paths.append(tmp_path / f"in{i}.npy")
        np.save(paths[-1], x)
    done = subprocess.run([sys.executable, "-c", SCRIPT, str(ex.path), *map(str, paths)],
                          capture_output=True, text=True, check=False)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "ok"
    np.testing.assert_allclose(np.load(f"{ex.path}.out.npy"), ex.expected[0], rtol=1e-5,
                               atol=1e-6)
