"""Fixtures and goldens on disk, whatever ``generate_args`` returns.

An artifact directory holds ``scenerun-codec.json`` (the format and the list of leaves),
``value.pkl`` (the object with every tensor and array replaced by a reference) and one
file per leaf: ``torch.save`` for a torch tensor, ``.npy`` for a numpy array. Everything
else (containers, an args builder, scalars of any kind, ctypes values) is pickled in
``value.pkl``. dtype, shape, memory order and strides survive; an object reachable twice
(a tensor both in a builder's spec list and in its name map) is one leaf, loaded once,
so aliasing survives too.

Loads map the leaf files (``torch.load(mmap=True)``, ``np.load(mmap_mode="c")``):
copy-on-write, so a device run may write into the loaded tensors without touching the
file, and a 4 GiB fixture costs page faults for the bytes actually read.

A golden is saved against its fixture (``base``): a leaf equal to the fixture's leaf at
the same position (the inputs a golden computed in place left alone) is stored as a
reference to that leaf, not again; loading it maps the fixture's file afresh, so the
golden never shares memory with the arguments the device run writes into.

A conftest may replace all of it: ``pytest_scenerun_save(obj, path)`` returning True
means it wrote ``path`` itself, and then ``pytest_scenerun_load(path)`` must return the
object.

Artifacts are data, not code. Whoever can write the cache can write an artifact, so a
load never runs what an artifact names: leaves are read with ``weights_only=True`` and
``allow_pickle=False``, and ``value.pkl`` is read by an unpickler that constructs only
data — Python's containers and scalars, numpy dtypes and scalars, torch dtypes, sizes
and devices, ctypes' simple C types — and classes the project itself marks as trusted
(``scenerun_codec_trust = "pickle"`` as a class attribute, on a class already
imported). Anything else in ``value.pkl`` is refused with a ``CodecError`` naming it,
and ``save`` refuses such an object up front. A project whose artifacts hold other
objects opts in to plain pickle for all of them with ``codec_trust = "pickle"`` under
``[tool.scenerun]`` in its ``pyproject.toml`` (the first one found from the current
directory upwards), or with ``SCENERUN_CODEC_TRUST=pickle`` in its manifest's ``env:``:
that trusts whoever can write the cache to run code in its tests.
"""

from __future__ import annotations

import enum
import io
import json
import os
import pickle
import sys
from typing import IO, Any, Callable, Tuple, TypedDict

from pluggy import HookRelay

from .protocol import scenerun_table

FORMAT = 1
INDEX = "scenerun-codec.json"
VALUE = "value.pkl"

# The [tool.scenerun] key, and the class attribute, that let plain pickle in.
TRUST_KEY = "codec_trust"
CLASS_TRUST = "scenerun_codec_trust"
# The same choice as an environment variable (a manifest's env: sets it).
TRUST_ENV = "SCENERUN_CODEC_TRUST"
PICKLE = "pickle"
DATA = "data"

# Builtins a data-only load constructs.
_SAFE_BUILTINS = frozenset(
    "int float complex str bytes bytearray bool list dict tuple set frozenset slice range object".split()
)
# Functions pickle itself uses to rebuild an instance of a class it was allowed to name.
_SAFE_FUNCTIONS = frozenset(
    {
        ("copyreg", "_reconstructor"),
        ("copyreg", "__newobj__"),
        ("collections", "OrderedDict"),
        ("numpy", "dtype"),
        ("numpy.core.multiarray", "scalar"),
        ("numpy._core.multiarray", "scalar"),
        ("_ctypes", "_unpickle"),
    }
)


class CodecError(Exception):
    """An artifact this codec cannot read (or an object it cannot write)."""


class GoldenMode(str, enum.Enum):
    """How a golden was computed: by changing the arguments in place, or returned."""

    IN_PLACE = "in_place"
    RETURNED = "returned"


class Leaf(TypedDict, total=False):
    """One leaf of an artifact's index: a file of its own, or the fixture's leaf ``k``."""

    file: str
    fixture: int


class Index(TypedDict, total=False):
    """``scenerun-codec.json``: the format, who wrote the artifact, and its leaves."""

    format: int
    codec: str  # "pickle" or "hook"
    mode: str | None  # a GoldenMode's value for a golden, else None
    leaves: list[Leaf]


#: What ``value.pkl`` names a leaf by: ``("leaf", k)`` or ``("fixture", k)``.
LeafId = Tuple[str, int]


def _pyproject_trust(start: str) -> str:
    """``[tool.scenerun] codec_trust`` of the first ``pyproject.toml`` from ``start``
    upwards: ``data`` (the default) or ``pickle``."""
    d = os.path.abspath(start)
    while True:
        path = os.path.join(d, "pyproject.toml")
        if os.path.isfile(path):
            table = scenerun_table(path)
            if table is None:
                return DATA
            value = table.get(TRUST_KEY, DATA)
            if value not in (DATA, PICKLE):
                raise CodecError(f"{path}: [tool.scenerun] {TRUST_KEY} is {value!r}: {DATA!r} or {PICKLE!r}")
            return str(value)
        parent = os.path.dirname(d)
        if parent == d:
            return DATA
        d = parent


def trust() -> str:
    """How artifacts are read in this process: ``data`` or ``pickle`` (see the module's
    doc). ``SCENERUN_CODEC_TRUST`` (set in a manifest's ``env:``, so it reaches every
    fixture, golden and lane process and is part of their keys) wins over the
    ``pyproject.toml`` setting: a project opts in without editing the suite's files."""
    value = os.environ.get(TRUST_ENV)
    if value:
        if value not in (DATA, PICKLE):
            raise CodecError(f"{TRUST_ENV} is {value!r}: {DATA!r} or {PICKLE!r}")
        return value
    return _pyproject_trust(os.getcwd())


def _lookup(module: str, name: str) -> Any:
    """The object ``module.name`` names, from a module already imported (never an
    import: importing runs code); None when there is none."""
    obj: Any = sys.modules.get(module)
    for part in name.split("."):
        obj = getattr(obj, part, None) if obj is not None else None
    return obj


def _allowed(module: str, name: str) -> Any:
    """What a data-only load may construct for a global ``module.name``; None: not it."""
    if module == "builtins":
        return getattr(__import__("builtins"), name) if name in _SAFE_BUILTINS else None
    if (module, name) in _SAFE_FUNCTIONS:
        return _lookup(module, name) or getattr(__import__(module, fromlist=[name]), name, None)
    obj = _lookup(module, name)
    if obj is None:
        return None
    ctypes = sys.modules.get("ctypes")
    if module == "ctypes" and ctypes is not None and isinstance(obj, type) and issubclass(obj, ctypes._SimpleCData):
        return obj
    torch = _torch()
    if module == "torch" and torch is not None:
        if isinstance(obj, torch.dtype) or obj in (getattr(torch, "Size", None), getattr(torch, "device", None)):
            return obj
    if isinstance(obj, type) and getattr(obj, CLASS_TRUST, None) == PICKLE:
        return obj
    return None


def _refusal(what: str, module: str, name: str) -> str:
    return (
        f"{what} names {module}.{name}, which a data-only artifact never constructs "
        f"(artifacts are read as data: whoever can write the cache writes them). "
        f"Give that class `{CLASS_TRUST} = \"{PICKLE}\"`, set `{TRUST_KEY} = \"{PICKLE}\"` under "
        f"[tool.scenerun] in pyproject.toml or {TRUST_ENV}: {PICKLE} in the manifest's env: (each "
        f"trusts whoever can write the cache to run code), or define "
        f"pytest_scenerun_save/pytest_scenerun_load in a conftest.py"
    )


def _torch() -> Any:
    return sys.modules.get("torch")


def _numpy() -> Any:
    return sys.modules.get("numpy")


def _is_tensor(obj: object) -> bool:
    torch = _torch()
    return (
        torch is not None
        and isinstance(obj, getattr(torch, "Tensor", ()))
        and getattr(obj, "layout", None) == getattr(torch, "strided", object())
    )


def _is_array(obj: object) -> bool:
    np = _numpy()
    return np is not None and isinstance(obj, np.ndarray) and obj.dtype != object


def _same(a: Any, b: Any) -> bool:
    """Equal leaves: same kind, dtype, shape and layout, equal bytes."""
    if _is_tensor(a) and _is_tensor(b):
        torch = _torch()
        return (
            a.dtype == b.dtype
            and tuple(a.shape) == tuple(b.shape)
            and tuple(a.stride()) == tuple(b.stride())
            and bool(torch.equal(a, b))
        )
    if _is_array(a) and _is_array(b):
        np = _numpy()
        return (
            a.dtype == b.dtype
            and a.shape == b.shape
            and a.flags.f_contiguous == b.flags.f_contiguous
            and a.flags.c_contiguous == b.flags.c_contiguous
            and bool(np.array_equal(a, b))
        )
    return False


class _Pickler(pickle.Pickler):
    """Pickles the object's skeleton: each tensor or array becomes a persistent id, the
    same object the same id (first occurrence order), and is handed to ``leaf``."""

    def __init__(self, file: IO[bytes], leaf: Callable[[Any, int], LeafId]):
        super().__init__(file, protocol=pickle.HIGHEST_PROTOCOL)
        self._leaf = leaf
        self._ids: dict[int, LeafId] = {}
        self._keep: list[object] = []  # the ids stay valid while we hold the objects

    def persistent_id(self, obj: Any) -> LeafId | None:
        if not (_is_tensor(obj) or _is_array(obj)):
            return None
        pid = self._ids.get(id(obj))
        if pid is None:
            pid = self._leaf(obj, len(self._ids))
            self._ids[id(obj)] = pid
            self._keep.append(obj)
        return pid


def save(
    obj: Any, out_dir: str, *, hook: HookRelay | None = None, base: str | None = None, mode: GoldenMode | None = None
) -> None:
    """Write ``obj`` into the (existing) directory ``out_dir``. ``base``: the fixture a
    golden was computed from; ``mode``: how a golden was computed (``in_place`` or
    ``returned``), kept for the lane."""
    if hook is not None and hook.pytest_scenerun_save(obj=obj, path=out_dir):
        _write_index(out_dir, {"format": FORMAT, "codec": "hook", "mode": mode.value if mode else None})
        return
    base_leaves = _load_leaf_list(base, hook) if base else []
    leaves: list[Leaf] = []

    def leaf(o: Any, k: int) -> LeafId:
        if k < len(base_leaves) and base_leaves[k] is not None and _same(o, base_leaves[k]):
            leaves.append({"fixture": k})
            return ("fixture", k)
        if _is_tensor(o):
            name = f"leaf-{k}.pt"
            _torch().save(o, os.path.join(out_dir, name))
        else:
            name = f"leaf-{k}.npy"
            _numpy().save(os.path.join(out_dir, name), o, allow_pickle=False)
        leaves.append({"file": name})
        return ("leaf", k)

    buf = io.BytesIO()
    try:
        _Pickler(buf, leaf).dump(obj)
    except (pickle.PicklingError, TypeError, AttributeError) as e:
        raise CodecError(
            f"cannot save a {type(obj).__name__}: {e} "
            "(define pytest_scenerun_save/pytest_scenerun_load in a conftest.py)"
        ) from e
    if trust() != PICKLE:
        for module, name in _globals_of(buf.getvalue()):
            if _allowed(module, name) is None:
                raise CodecError(_refusal(f"cannot save a {type(obj).__name__}: it", module, name))
    with open(os.path.join(out_dir, VALUE), "wb") as f:
        f.write(buf.getvalue())
    _write_index(
        out_dir, {"format": FORMAT, "codec": "pickle", "mode": mode.value if mode else None, "leaves": leaves}
    )


def _write_index(out_dir: str, index: Index) -> None:
    with open(os.path.join(out_dir, INDEX), "w") as f:
        json.dump(index, f, indent=1)


def read_index(in_dir: str) -> Index:
    path = os.path.join(in_dir, INDEX)
    try:
        with open(path) as f:
            index: Index = json.load(f)
    except FileNotFoundError:
        raise CodecError(f"{in_dir} is not a scenerun artifact (no {INDEX})") from None
    if index.get("format") != FORMAT:
        raise CodecError(f"{path}: format {index.get('format')!r}, this plugin reads {FORMAT}")
    return index


def _load_file(in_dir: str, name: str) -> Any:
    path = os.path.join(in_dir, name)
    if name.endswith(".pt"):
        import torch

        try:
            return torch.load(path, mmap=True, weights_only=True)
        except (RuntimeError, ValueError):
            # A file torch cannot map (an old zip layout, say): read it whole.
            return torch.load(path, weights_only=True)
    import numpy as np

    try:
        return np.load(path, mmap_mode="c", allow_pickle=False)
    except ValueError:
        # An empty array cannot be mapped.
        return np.load(path, allow_pickle=False)


def _load_leaf_list(in_dir: str, hook: HookRelay | None) -> list[Any]:
    """The fixture's leaves, each loaded afresh (None: a hook-saved artifact)."""
    index = read_index(in_dir)
    if index.get("codec") != "pickle":
        return []
    out: list[Any] = []
    for entry in index.get("leaves", []):
        out.append(_load_file(in_dir, entry["file"]) if "file" in entry else None)
    return out


class _Unpickler(pickle.Unpickler):
    """Reads ``value.pkl``: leaves through ``resolve``; with ``data_only``, a global is
    constructed only when ``_allowed`` names it."""

    def __init__(self, file: IO[bytes], resolve: Callable[[LeafId], Any], data_only: bool, what: str = VALUE):
        super().__init__(file)
        self._resolve = resolve
        self._loaded: dict[LeafId, Any] = {}
        self._data_only = data_only
        self._what = what

    def persistent_load(self, pid: Any) -> Any:
        if pid not in self._loaded:
            self._loaded[pid] = self._resolve(pid)
        return self._loaded[pid]

    def find_class(self, module: str, name: str) -> Any:
        if not self._data_only:
            return super().find_class(module, name)
        found = _allowed(module, name)
        if found is None:
            raise CodecError(_refusal(self._what, module, name))
        return found


class _Anything:
    """Stands in for every global while ``_globals_of`` reads a pickle."""

    def __init__(self, *args: object, **kwargs: object):
        pass

    def __call__(self, *args: object, **kwargs: object) -> _Anything:
        return _Anything()

    def __setstate__(self, state: object) -> None:
        pass

    def __setitem__(self, key: object, value: object) -> None:
        pass

    def append(self, value: object) -> None:
        pass

    def extend(self, values: object) -> None:
        pass


class _Recorder(pickle.Unpickler):
    """Lists the globals a pickle names, constructing none of them."""

    def __init__(self, file: IO[bytes]):
        super().__init__(file)
        self.names: list[tuple[str, str]] = []

    def persistent_load(self, pid: Any) -> None:
        return None

    def find_class(self, module: str, name: str) -> type[_Anything]:
        self.names.append((module, name))
        return _Anything


def _globals_of(data: bytes) -> list[tuple[str, str]]:
    """Every (module, name) the pickle ``data`` names."""
    r = _Recorder(io.BytesIO(data))
    r.load()
    return r.names


def load(in_dir: str, *, hook: HookRelay | None = None, base: str | None = None) -> Any:
    """The object saved in ``in_dir``; ``base``: the fixture directory a golden's
    references point into."""
    index = read_index(in_dir)
    if index.get("codec") == "hook":
        obj = hook.pytest_scenerun_load(path=in_dir) if hook is not None else None
        if obj is None:
            raise CodecError(
                f"{in_dir} was written by a pytest_scenerun_save hook, and no pytest_scenerun_load hook read it"
            )
        return obj
    leaves = index.get("leaves", [])

    def resolve(pid: LeafId) -> Any:
        kind, k = pid
        if kind == "leaf":
            return _load_file(in_dir, leaves[k]["file"])
        if kind == "fixture":
            if not base:
                raise CodecError(f"{in_dir} refers to its fixture, and no fixture was given")
            return _load_file(base, read_index(base)["leaves"][k]["file"])
        raise CodecError(f"{in_dir}: unknown reference {pid!r}")

    path = os.path.join(in_dir, VALUE)
    with open(path, "rb") as f:
        return _Unpickler(f, resolve, data_only=trust() != PICKLE, what=path).load()


def mode(in_dir: str) -> GoldenMode | None:
    """How the golden in ``in_dir`` was computed (None: not a golden, or not said)."""
    value = read_index(in_dir).get("mode")
    return GoldenMode(value) if value in (GoldenMode.IN_PLACE.value, GoldenMode.RETURNED.value) else None


def assign(target: Any, source: Any) -> None:
    """Make ``target`` hold what ``source`` holds, in place: the golden computed in place
    on a clone of the arguments is handed back through the caller's object."""
    if _is_tensor(target):
        target.copy_(source)
    elif _is_array(target):
        target[...] = source
    elif isinstance(target, dict):
        target.clear()
        target.update(source)
    elif isinstance(target, list):
        target[:] = source
    elif hasattr(target, "__dict__") and type(target) is type(source):
        target.__dict__.clear()
        target.__dict__.update(source.__dict__)
    else:
        raise CodecError(
            f"cannot update a {type(target).__name__} in place with the stored golden "
            "(define pytest_scenerun_save/pytest_scenerun_load in a conftest.py)"
        )
