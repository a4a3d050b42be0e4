#!/usr/bin/env python3
"""A pytest scene suite for bench/pytest.sh: CLASSES scene classes x CASES cases over
FILES test modules, kernels from SOURCES C files sharing two headers (deterministic)."""

import argparse
import os

p = argparse.ArgumentParser()
p.add_argument("dir")
p.add_argument("--classes", type=int, default=100)
p.add_argument("--cases", type=int, default=3)
p.add_argument("--files", type=int, default=10)
p.add_argument("--sources", type=int, default=20)
a = p.parse_args()

os.makedirs(f"{a.dir}/include", exist_ok=True)
os.makedirs(f"{a.dir}/kernels", exist_ok=True)
os.makedirs(f"{a.dir}/tests/st", exist_ok=True)
with open(f"{a.dir}/include/common.h", "w") as f:
    f.write('#include "scale.h"\ntypedef long idx_t;\n')
with open(f"{a.dir}/include/scale.h", "w") as f:
    f.write("#define SCALE 2.0\n")
for s in range(a.sources):
    with open(f"{a.dir}/kernels/k{s}.c", "w") as f:
        f.write(f'#include "common.h"\nvoid k{s}(const double *x, double *o, idx_t n) {{ for (idx_t i = 0; i < n; i++) o[i] = SCALE * x[i] + {s}; }}\n')
with open(f"{a.dir}/pytest.ini", "w") as f:
    f.write("[pytest]\ntestpaths = tests\n")
with open(f"{a.dir}/scenes.yaml", "w") as f:
    f.write(
        "version: 1\nplatform: sim\ncache:\n  dir: build/cache\n"
        "toolchains:\n  cc:\n    compile: \"cc -shared -fPIC -O1 {includes} {source} -o {out}\"\n"
        "    identity: \"cc --version\"\n    depfile: \"-MD -MF {depfile}\"\n"
        "scenes_from:\n  - run: \"python -m scenerun_pytest collect tests/st --device-mode process\"\n"
        "    inputs: [\"tests/st/**/*.py\", pytest.ini]\n"
    )
per_file = (a.classes + a.files - 1) // a.files
c = 0
for fi in range(a.files):
    lines = ["from scenerun_pytest import Kernel, SceneTest\n"]
    for _ in range(per_file):
        if c >= a.classes:
            break
        s = c % a.sources
        cases = ", ".join(f'{{"name": "c{j}", "params": {{"n": {8 * (j + 1)}, "seed": {c * 10 + j}}}}}' for j in range(a.cases))
        lines.append(
            f"""

class TestScene{c:03d}(SceneTest):
    KERNELS = [Kernel("k{s}", "../../kernels/k{s}.c", ["../../include"])]
    CASES = [{cases}]

    def generate_args(self, params):
        return {{"x": [float((params["seed"] * 31 + i) % 17) for i in range(params["n"])]}}

    def compute_golden(self, args, params):
        return {{"o": [2.0 * v + {s} for v in args["x"]]}}

    def run_device(self, device, kernels, args, params):
        raise NotImplementedError("the benchmark measures collect and warm only")
"""
        )
        c += 1
    with open(f"{a.dir}/tests/st/test_m{fi:02d}.py", "w") as f:
        f.write("".join(lines))
