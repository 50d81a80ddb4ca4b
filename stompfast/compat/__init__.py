"""Drop-in replacements for other STOMP clients' APIs, on stompfast's wire layer and shared core code.

``stompfast.compat.stomp`` is stomp.py 8's public API. :func:`install` (opt-in, never
done on import) makes ``import stomp`` give it, for code and tests that cannot be edited::

    import stompfast.compat
    stompfast.compat.install()
    import stomp                 # stompfast.compat.stomp

See ``docs/migrating.md`` for what is faster and every known difference.
"""

import sys
from types import ModuleType

from ..errors import ConfigurationError

_SUBMODULES = ("connect", "constants", "exception", "listener", "log", "logging", "protocol", "transport", "utils")


def install() -> ModuleType:
    """Make ``import stomp`` (and ``import stomp.listener`` etc.) give :mod:`stompfast.compat.stomp`; return it.

    Call it before anything imports ``stomp``. Calling it again is harmless.

    Raises:
        ConfigurationError: the real stomp.py is already imported in this process (code that
            already holds its classes would mix the two).
    """
    from . import stomp

    current = sys.modules.get("stomp")
    if current is not None and current is not stomp:
        raise ConfigurationError(
            "stomp.py is already imported (from %s): call stompfast.compat.install() before the first"
            " `import stomp`" % getattr(current, "__file__", "?")
        )
    sys.modules["stomp"] = stomp
    for name in _SUBMODULES:
        sys.modules["stomp." + name] = getattr(stomp, name)
    return stomp


def uninstall() -> None:
    """Undo :func:`install`: ``import stomp`` finds whatever is installed again (stomp.py, or nothing)."""
    from . import stomp

    if sys.modules.get("stomp") is stomp:
        del sys.modules["stomp"]
        for name in _SUBMODULES:
            sys.modules.pop("stomp." + name, None)


__all__ = ["install", "uninstall"]
