"""stomp.py's logging shim (``stomp.logging``; stomp.py 9 calls it ``stomp.log``).

Records go to the ``stomp.py`` logger, as stomp.py's do, so existing logging
configuration keeps working after the switch.
"""

import logging as _logging
import sys
from typing import Any, Callable

DEBUG = _logging.DEBUG
INFO = _logging.INFO

#: stomp.py logs tracebacks of connection failures only when this is true
verbose = False

_logger = _logging.getLogger("stomp.py")
debug: Callable[..., None] = _logger.debug
info: Callable[..., None] = _logger.info
warning: Callable[..., None] = _logger.warning
error: Callable[..., None] = _logger.error
isEnabledFor: Callable[[int], bool] = _logger.isEnabledFor
setLevel: Callable[[Any], None] = _logger.setLevel


def log_to_stdout(verbose_logging: bool = True) -> None:
    """Print every record of the ``stomp.py`` logger on stdout, at DEBUG and above."""
    global verbose
    handler = _logging.StreamHandler(sys.stdout)
    handler.setLevel(_logging.DEBUG)
    handler.setFormatter(_logging.Formatter("%(asctime)s - %(name)s - %(levelname)s - %(message)s"))
    _logger.addHandler(handler)
    _logger.setLevel(_logging.DEBUG)
    verbose = verbose_logging
