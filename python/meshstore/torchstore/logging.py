"""torchstore.logging.init_logging: Python's root logger to stdout, at
TORCHSTORE_LOG_LEVEL (default INFO). meshstore's own C++ log goes through
spdlog (MESHSTORE_LOG_LEVEL, docs/config.md)."""

import logging as _logging
import os
import sys


def init_logging():
    """Sends Python log records to stdout at TORCHSTORE_LOG_LEVEL, once."""
    level = os.environ.get("TORCHSTORE_LOG_LEVEL", "INFO").upper()
    _logging.root.setLevel(level)
    for handler in _logging.root.handlers:
        if (isinstance(handler, _logging.StreamHandler)
                and getattr(handler, "stream", None) is sys.stdout):
            return
    handler = _logging.StreamHandler(sys.stdout)
    handler.setLevel(level)
    _logging.root.addHandler(handler)


__all__ = ["init_logging"]
