"""Stand-in for torch, enough for pytest to collect simpler's scene classes (see
../_standin.py): dtypes, a Tensor class, and every other name a permissive stub."""

from _standin import Anything, module_getattr


class dtype(Anything):
    def __init__(self, name):
        self.name = name

    def __repr__(self):
        return f"torch.{self.name}"


for _n in (
    "float16 float32 float64 bfloat16 half float double int8 int16 int32 int64 uint8 "
    "uint16 uint32 uint64 bool complex64 float8_e4m3fn float8_e5m2"
).split():
    globals()[_n] = dtype(_n)


class Tensor(Anything):
    pass


class Size(tuple):
    pass


__version__ = "0.0+stand-in"


def __getattr__(name):
    return module_getattr(name)
