"""Permissive stand-ins for what hw-native-sys/simpler imports but this machine cannot
install: its C++ extension (`_task_interface`), and, for a collect-only check, torch and
cloudpickle. Collection imports every test module and evaluates its class bodies
(`CASES`, `CALLABLE` with signatures such as `ArgDirection.IN`), so every name must
resolve; no stand-in computes anything. Used only by the adoption check in
tests/pytest_suite.rs (`SCENERUN_SIMPLER_TREE`)."""


class Anything:
    """A value that is whatever it is asked to be: callable, indexable, numeric."""

    def __init__(self, *args, **kwargs):
        pass

    def __call__(self, *args, **kwargs):
        return Anything()

    def __getattr__(self, name):
        if name.startswith("__") and name.endswith("__"):
            raise AttributeError(name)
        return Anything()

    def __getitem__(self, key):
        return Anything()

    def __setitem__(self, key, value):
        pass

    def __iter__(self):
        return iter(())

    def __len__(self):
        return 0

    def __int__(self):
        return 0

    def __index__(self):
        return 0

    def __float__(self):
        return 0.0

    def __bool__(self):
        return True

    def __hash__(self):
        return id(self)

    def __eq__(self, other):
        return self is other

    def __repr__(self):
        return "<stand-in>"


def _arith(name):
    def op(self, *args):
        return Anything()

    op.__name__ = name
    return op


for _name in (
    "add radd sub rsub mul rmul truediv rtruediv floordiv rfloordiv mod rmod pow rpow "
    "and rand or ror xor rxor lshift rlshift rshift rrshift neg pos abs invert lt le gt ge matmul rmatmul"
).split():
    setattr(Anything, f"__{_name}__", _arith(_name))


class AnyMeta(type):
    """Classes whose class attributes all exist (`ArgDirection.IN`); iterating one (an
    enum) yields nothing."""

    def __iter__(cls):
        return iter(())

    def __getattr__(cls, name):
        if name.startswith("__") and name.endswith("__"):
            raise AttributeError(name)
        return Anything()


class AnyClass(Anything, metaclass=AnyMeta):
    pass


def module_getattr(name):
    """For a module's `__getattr__`: every missing name is a class of its own, so it can
    be called, subclassed, used in `isinstance` and read attributes from."""
    if name.startswith("__") and name.endswith("__"):
        raise AttributeError(name)
    if name.isupper():
        return 1  # a constant: sizes, ids, flags
    return AnyMeta(name, (AnyClass,), {})


class _EqualsAll:
    def __eq__(self, other):
        return True

    def __ne__(self, other):
        return False

    __hash__ = object.__hash__


class AgreeingTable(dict):
    """A table of native enum values that agrees with whatever Python declares (the
    extension's own consistency checks at import time pass)."""

    def __contains__(self, key):
        return True

    def __getitem__(self, key):
        return _EqualsAll()
