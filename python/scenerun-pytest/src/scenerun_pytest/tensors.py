"""Named tensors on disk: ``index.json`` plus one ``<name>.bin`` of float64 values per
tensor (standard library ``array``), so fixtures and goldens need no numpy."""

from __future__ import annotations

import json
import os
import re
from array import array
from typing import Mapping

_NAME = re.compile(r"^[A-Za-z0-9_.-]{1,128}$")


def save(out_dir: str, tensors: Mapping[str, object]) -> None:
    if not isinstance(tensors, Mapping) or not tensors:
        raise TypeError("expected a non-empty mapping of tensor names to sequences of numbers")
    index = {}
    for name, values in tensors.items():
        if not isinstance(name, str) or not _NAME.match(name) or name in (".", ".."):
            raise ValueError(f"bad tensor name {name!r}")
        data = values if isinstance(values, array) and values.typecode == "d" else array("d", values)
        with open(os.path.join(out_dir, name + ".bin"), "wb") as f:
            data.tofile(f)
        index[name] = {"dtype": "float64", "len": len(data), "file": name + ".bin"}
    with open(os.path.join(out_dir, "index.json"), "w") as f:
        json.dump(index, f, indent=1, sort_keys=True)


def load(in_dir: str) -> dict:
    with open(os.path.join(in_dir, "index.json")) as f:
        index = json.load(f)
    out = {}
    for name, meta in index.items():
        data = array("d")
        with open(os.path.join(in_dir, meta["file"]), "rb") as f:
            data.fromfile(f, meta["len"])
        out[name] = data
    return out
