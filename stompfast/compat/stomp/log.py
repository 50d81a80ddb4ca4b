"""``stomp.log``: stomp.py 9's name for ``stomp.logging``; both names give the same module object.

The module replaces itself with ``logging`` in ``sys.modules``, so ``stomp.log.verbose`` and
``stomp.logging.verbose`` are one setting.
"""

import sys

from . import logging as _logging

sys.modules[__name__] = _logging
