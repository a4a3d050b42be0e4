"""Stand-in for simpler's C++ extension (see _standin.py)."""

from _standin import AgreeingTable, module_getattr as __getattr__  # noqa: F401

__build_commit__ = "stand-in"
DEFAULT_LOG_THRESHOLD = 25
MAX_TENSOR_DIMS = 8
MAX_REGISTERED_CALLABLE_IDS = 64
MAILBOX_SIZE = 4096
MAILBOX_FRAME_SIZE = 256
MAILBOX_ERROR_MSG_SIZE = 256
MAILBOX_OFF_ERROR_MSG = 0
MAILBOX_STATE_VALUES = AgreeingTable()
MAILBOX_PREPARATION_DISPOSITION_VALUES = AgreeingTable()
