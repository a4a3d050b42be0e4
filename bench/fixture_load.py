"""In-lock cost of a large fixture: loading it from the cache (mapped) against
regenerating it, with scenerun_pytest's codec. See bench/fixture-load.sh."""

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time

import numpy as np

from scenerun_pytest import codec


def generate(n, seed):
    rng = np.random.default_rng(seed)
    return {"x": rng.standard_normal(n, dtype=np.float32), "out": np.zeros(1 << 20, dtype=np.float32)}


def timed(f):
    t0 = time.perf_counter()
    r = f()
    return r, time.perf_counter() - t0


def child(path):
    """A fresh process, as a lane is: load, read every byte, clone (what simpler's
    test_run does with the arguments before its golden), as separate timings."""
    obj, t_load = timed(lambda: codec.load(path))
    s, t_read = timed(lambda: float(np.add.reduce(obj["x"], dtype=np.float64)))
    _, t_clone = timed(lambda: {k: v.copy() for k, v in obj.items()})
    print(json.dumps({"load": t_load, "read": t_read, "clone": t_clone, "sum": s}))


def drop_caches():
    try:
        os.sync()
        with open("/proc/sys/vm/drop_caches", "w") as f:
            f.write("3\n")
        return True
    except OSError:
        return False


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--gib", type=float, default=4.0)
    p.add_argument("--dir", default=None)
    p.add_argument("--child", default=None)
    a = p.parse_args()
    if a.child:
        child(a.child)
        return
    n = int(a.gib * (1 << 30)) // 4
    obj, t_gen = timed(lambda: generate(n, 7))
    out = tempfile.mkdtemp(prefix="fixture-", dir=a.dir)
    _, t_save = timed(lambda: codec.save(obj, out))
    del obj
    rows = {"generate": t_gen, "save": t_save, "bytes": n * 4}
    for cache in ("warm", "cold"):
        if cache == "cold" and not drop_caches():
            rows["cold"] = None
            continue
        r = subprocess.run([sys.executable, __file__, "--child", out], capture_output=True, text=True, check=True)
        rows[cache] = json.loads(r.stdout)
    subprocess.run(["rm", "-rf", out], check=True)
    print(json.dumps(rows))


if __name__ == "__main__":
    main()
