"""Scene tests declared the pytest way, for scenerun.

A scene test is a class deriving from :class:`SceneTest` with:

* ``KERNELS``: the kernels to compile (:class:`Kernel`: name, source, include dirs,
  flags), paths relative to the test file's directory;
* ``CASES``: one dict per case: ``name``, ``params``, optional ``devices`` (device ids
  the case holds, default 1), ``platforms`` (default: every platform) and ``tags``;
* ``generate_args(params)``: the fixture, named tensors (lists or ``array('d')``);
* ``compute_golden(args, params)``: the golden, named tensors computed from the fixture;
* ``run_device(device, kernels, args, params)``: the device run, returning the outputs
  that ``compare_outputs`` checks against the golden.

``scenerun`` compiles the kernels and computes fixtures and goldens outside the device
lock (``python -m scenerun_pytest fixture|golden``); inside it, one pytest process per
lane runs the device side of many cases with those artifacts, never recomputing them.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Callable, Iterable, Mapping, Sequence

__all__ = ["Kernel", "SceneTest", "assert_allclose", "__version__"]
__version__ = "0.1.0"


@dataclass(frozen=True)
class Kernel:
    """One kernel of a scene: compiled by the manifest's toolchain ``toolchain``."""

    name: str
    source: str
    include_dirs: Sequence[str] = ()
    flags: Sequence[str] = ()
    toolchain: str | None = None


def assert_allclose(
    actual: Iterable[float], expected: Iterable[float], rtol: float, atol: float, name: str = "output"
) -> None:
    """Raise AssertionError naming the first element out of tolerance."""
    actual, expected = list(actual), list(expected)
    if len(actual) != len(expected):
        raise AssertionError(f"{name}: {len(actual)} elements, golden has {len(expected)}")
    bad = [
        i
        for i, (a, e) in enumerate(zip(actual, expected))
        if not (math.isfinite(a) and abs(a - e) <= atol + rtol * abs(e))
    ]
    if bad:
        i = bad[0]
        raise AssertionError(
            f"{name}: {len(bad)} of {len(actual)} elements out of tolerance "
            f"(rtol={rtol}, atol={atol}); first at [{i}]: {actual[i]!r} != golden {expected[i]!r}"
        )


class SceneTest:
    """Base class of scene tests. Subclasses named ``Test*`` are collected by pytest:
    one test per case (``test_scene[<case>]``)."""

    KERNELS: Sequence[Kernel] = ()
    CASES: Sequence[Mapping[str, Any]] = ()
    #: Default toolchain of the kernels (a name from the manifest's ``toolchains:``).
    TOOLCHAIN: str = "cc"
    RTOL: float = 1e-6
    ATOL: float = 1e-9
    #: Tags added to every case's scene.
    TAGS: Sequence[str] = ()

    def generate_args(self, params: Mapping[str, Any]) -> Mapping[str, Any]:
        raise NotImplementedError("a scene test defines generate_args(params)")

    def compute_golden(self, args: Any, params: Mapping[str, Any]) -> Mapping[str, Any] | None:
        raise NotImplementedError("a scene test defines compute_golden(args, params)")

    def run_device(
        self, device: Any, kernels: Mapping[str, str], args: Any, params: Mapping[str, Any]
    ) -> Mapping[str, Any]:
        raise NotImplementedError("a scene test defines run_device(device, kernels, args, params)")

    def compare_outputs(self, outputs: Mapping[str, Any], golden: Mapping[str, Any], params: Mapping[str, Any]) -> None:
        """Every golden tensor must be among the outputs and match within RTOL/ATOL."""
        for name, expected in golden.items():
            if name not in outputs:
                raise AssertionError(f"the device run returned no output `{name}`")
            assert_allclose(outputs[name], expected, self.RTOL, self.ATOL, name)

    def test_scene(
        self, scene_case: Mapping[str, Any], scene_run: Callable[[SceneTest, Mapping[str, Any]], None]
    ) -> None:
        """The device side of one case, with artifacts scenerun built (see plugin)."""
        scene_run(self, scene_case)
