"""The codec's round trip (scenerun_pytest.codec), with numpy: run by tests/pytest_suite.rs
with the virtualenv's pytest."""

import ctypes
import os

import numpy as np
import pytest

from scenerun_pytest import codec


class Args:
    """An args builder like a suite's: arrays in a list and a name map, the same objects.
    Marked as a class the project trusts the cache to construct (artifacts are data
    only otherwise)."""

    scenerun_codec_trust = "pickle"

    def __init__(self, **named):
        self._specs = list(named.items())
        self._data = dict(named)

    def __getattr__(self, name):
        if name.startswith("_"):
            raise AttributeError(name)
        return self._data[name]

    def clone(self):
        new = Args.__new__(Args)
        new._data = {k: (v.copy(order="K") if isinstance(v, np.ndarray) else v) for k, v in self._data.items()}
        new._specs = [(k, new._data[k]) for k, _ in self._specs]
        return new


def sample():
    return Args(
        x=np.arange(12, dtype=np.float32).reshape(3, 4),
        f=np.asfortranarray(np.arange(6, dtype=np.float64).reshape(2, 3)),
        i8=np.array([-1, 2, 3], dtype=np.int8),
        flags=np.array([True, False]),
        zero_d=np.array(7.5),
        empty=np.zeros((0, 4), dtype=np.int64),
        out=np.zeros(4, dtype=np.float32),
        half=np.float16(1.5),
        n=12,
        scale=ctypes.c_float(0.25),
        count=ctypes.c_int64(-3),
        nested={"t": (np.ones(2, dtype=np.uint16), [1, "a"])},
    )


def check_same(a, b):
    assert a.dtype == b.dtype and a.shape == b.shape
    assert a.flags.f_contiguous == b.flags.f_contiguous and a.flags.c_contiguous == b.flags.c_contiguous
    assert np.array_equal(a, b)


def test_round_trip_keeps_dtype_shape_order_scalars_and_aliasing(tmp_path):
    obj = sample()
    codec.save(obj, str(tmp_path))
    got = codec.load(str(tmp_path))
    for name in ("x", "f", "i8", "flags", "zero_d", "empty", "out"):
        check_same(getattr(got, name), getattr(obj, name))
    assert type(got.half) is np.float16 and got.half == obj.half
    assert got.n == 12
    assert type(got.scale) is ctypes.c_float and got.scale.value == 0.25
    assert type(got.count) is ctypes.c_int64 and got.count.value == -3
    check_same(got.nested["t"][0], obj.nested["t"][0])
    assert got.nested["t"][1] == [1, "a"]
    # The list and the map still hold the same objects.
    assert all(got._data[k] is v for k, v in got._specs)
    # Mapped copy-on-write: writable, the file unchanged.
    assert isinstance(got.x, np.memmap)
    got.x[0, 0] = 99
    assert codec.load(str(tmp_path)).x[0, 0] == 0


def test_a_golden_refers_to_the_unchanged_fixture_leaves(tmp_path):
    fix, gold = tmp_path / "fixture", tmp_path / "golden"
    fix.mkdir()
    gold.mkdir()
    codec.save(sample(), str(fix))
    args = codec.load(str(fix)).clone()
    args.out[:] = args.x.sum(axis=0)  # computed in place
    codec.save(args, str(gold), base=str(fix), mode=codec.GoldenMode.IN_PLACE)
    stored = sorted(f for f in os.listdir(gold) if f.startswith("leaf-"))
    assert stored == ["leaf-6.npy"], stored  # only `out` is stored again
    assert codec.mode(str(gold)) is codec.GoldenMode.IN_PLACE
    golden = codec.load(str(gold), base=str(fix))
    check_same(golden.out, np.array([12, 15, 18, 21], dtype=np.float32))
    check_same(golden.x, sample().x)
    # The golden never shares memory with another load of the fixture.
    device_args = codec.load(str(fix))
    device_args.x[:] = -1
    check_same(golden.x, sample().x)


def test_assign_hands_a_golden_back_in_place(tmp_path):
    codec.save(sample(), str(tmp_path))
    golden = codec.load(str(tmp_path))
    golden.out[:] = 5
    target = sample().clone()
    codec.assign(target, golden)
    check_same(target.out, np.full(4, 5, dtype=np.float32))
    d = {"a": 1}
    codec.assign(d, {"b": 2})
    assert d == {"b": 2}
    arr = np.zeros(3)
    codec.assign(arr, np.ones(3))
    assert arr.sum() == 3
    with pytest.raises(codec.CodecError):
        codec.assign(3, 4)


class Hooks:
    def __init__(self):
        self.saved = []

    def pytest_scenerun_save(self, obj, path):
        with open(os.path.join(path, "mine.txt"), "w") as f:
            f.write(repr(obj))
        self.saved.append(path)
        return True

    def pytest_scenerun_load(self, path):
        with open(os.path.join(path, "mine.txt")) as f:
            return eval(f.read())


def test_save_and_load_hooks_replace_the_codec(tmp_path):
    hooks = Hooks()
    codec.save({"k": [1, 2]}, str(tmp_path), hook=hooks)
    assert hooks.saved == [str(tmp_path)]
    assert codec.load(str(tmp_path), hook=hooks) == {"k": [1, 2]}
    with pytest.raises(codec.CodecError, match="pytest_scenerun_load"):
        codec.load(str(tmp_path))


def test_what_cannot_be_pickled_names_the_hooks(tmp_path):
    with pytest.raises(codec.CodecError, match="pytest_scenerun_save"):
        codec.save({"f": lambda: 1}, str(tmp_path))


def test_an_artifact_of_another_format_is_refused(tmp_path):
    (tmp_path / "index.json").write_text("{}")
    with pytest.raises(codec.CodecError, match="not a scenerun artifact"):
        codec.load(str(tmp_path))


class Plain:
    """A class no one marked: a data-only artifact never holds one."""

    def __init__(self, v):
        self.v = v


class Evil:
    """What an attacker's value.pkl does on load: run a command."""

    def __init__(self, cmd):
        self.cmd = cmd

    def __reduce__(self):
        return (os.system, (self.cmd,))


def plant_evil(art, marker):
    """Replace an artifact's value.pkl with one that runs `touch marker` when unpickled."""
    import pickle

    (art / codec.VALUE).write_bytes(pickle.dumps(Evil(f"touch {marker}")))


def test_a_planted_value_pkl_never_runs_code(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)  # no pyproject.toml: the default, data only
    art, marker = tmp_path / "art", tmp_path / "PWNED"
    art.mkdir()
    codec.save(sample(), str(art))
    plant_evil(art, marker)
    with pytest.raises(codec.CodecError, match="system") as e:
        codec.load(str(art))
    assert "codec_trust" in str(e.value)
    assert not marker.exists()


def test_save_refuses_a_class_the_project_did_not_mark(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    with pytest.raises(codec.CodecError, match="test_codec.Plain") as e:
        codec.save({"p": Plain(np.zeros(2))}, str(tmp_path))
    assert "scenerun_codec_trust" in str(e.value) and "pytest_scenerun_save" in str(e.value)
    # Data, numpy and ctypes scalars, and marked classes need nothing.
    codec.save({"n": 1, "s": np.float32(2), "c": ctypes.c_int(3), "a": Args(x=np.ones(2))}, str(tmp_path))
    got = codec.load(str(tmp_path))
    assert got["c"].value == 3 and got["a"].x.sum() == 2


def test_pickle_is_the_projects_choice_in_pyproject(tmp_path, monkeypatch):
    """codec_trust = "pickle" trusts whoever writes the cache: a planted value.pkl runs."""
    (tmp_path / "pyproject.toml").write_text('[tool.scenerun]\ncodec_trust = "pickle"\n')
    (tmp_path / "sub").mkdir()
    monkeypatch.chdir(tmp_path / "sub")  # found from a directory below it too
    art, marker = tmp_path / "art", tmp_path / "RAN"
    art.mkdir()
    codec.save({"p": Plain(3)}, str(art))
    assert codec.load(str(art))["p"].v == 3
    plant_evil(art, marker)
    codec.load(str(art))
    assert marker.exists()
    (tmp_path / "pyproject.toml").write_text('[tool.scenerun]\ncodec_trust = "yes"\n')
    with pytest.raises(codec.CodecError, match="codec_trust"):
        codec.load(str(art))


def test_pickle_is_the_projects_choice_in_the_manifests_env(tmp_path, monkeypatch):
    """SCENERUN_CODEC_TRUST=pickle (a manifest's env:) opts in without editing the suite,
    and wins over pyproject.toml; an unknown value is refused."""
    (tmp_path / "pyproject.toml").write_text('[tool.scenerun]\ncodec_trust = "data"\n')
    monkeypatch.chdir(tmp_path)
    art, marker = tmp_path / "art", tmp_path / "RAN"
    art.mkdir()
    with pytest.raises(codec.CodecError):
        codec.save({"p": Plain(3)}, str(art))
    monkeypatch.setenv("SCENERUN_CODEC_TRUST", "pickle")
    codec.save({"p": Plain(3)}, str(art))
    assert codec.load(str(art))["p"].v == 3
    plant_evil(art, marker)
    codec.load(str(art))
    assert marker.exists()
    monkeypatch.setenv("SCENERUN_CODEC_TRUST", "sometimes")
    with pytest.raises(codec.CodecError, match="SCENERUN_CODEC_TRUST"):
        codec.load(str(art))
