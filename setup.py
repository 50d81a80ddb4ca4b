"""Builds the Cython extension ``stompfast._scanner_c`` and nothing else.

All metadata lives in pyproject.toml. Which scanner gets built:

* ``STOMPFAST_NO_EXTENSIONS=1``: none, a pure-Python build (the same variable also
  makes ``import stompfast`` ignore a built extension).
* Cython importable (it is in the build requirements): ``_scanner_c.pyx`` is compiled.
* Cython absent (``--no-build-isolation`` without it) but the generated
  ``_scanner_c.c`` present (every sdist ships it): that file is compiled.
* No working C compiler (or neither source): one warning line, and the pure-Python
  build is installed; it behaves identically, with a slower scanner.
  ``STOMPFAST_REQUIRE_EXTENSIONS=1`` makes that an error instead (CI sets it).
"""

import os
import sys

from setuptools import Extension, setup
from setuptools.command.build_ext import build_ext

PYX = os.path.join("stompfast", "_scanner_c.pyx")
GENERATED_C = os.path.join("stompfast", "_scanner_c.c")
NAME = "stompfast._scanner_c"
# -O3 is gcc/clang's; MSVC's defaults are kept (an unknown flag would fail the build there)
COMPILE_ARGS = [] if sys.platform == "win32" else ["-O3"]


def _warn(reason: str) -> None:
    print(
        f"WARNING: stompfast: the C scanner is not built ({reason}); installing the pure-Python build,"
        " which behaves identically with a slower scanner (STOMPFAST_REQUIRE_EXTENSIONS=1 makes this an error)",
        file=sys.stderr,
    )


def _require() -> bool:
    return bool(os.environ.get("STOMPFAST_REQUIRE_EXTENSIONS"))


class OptionalBuildExt(build_ext):
    """build_ext that falls back to the pure-Python build when compiling fails."""

    def run(self) -> None:
        try:
            super().run()
        except Exception as exc:  # no compiler at all (DistutilsPlatformError and the like)
            if _require():
                raise
            _warn(f"{type(exc).__name__}: {exc}")

    def build_extension(self, ext: Extension) -> None:
        try:
            super().build_extension(ext)
        except Exception as exc:  # CompileError, LinkError, a compiler that is not there
            if _require():
                raise
            _warn(f"{type(exc).__name__}: {str(exc).strip().splitlines()[-1] if str(exc).strip() else 'failed'}")


def _extensions() -> list:
    if os.environ.get("STOMPFAST_NO_EXTENSIONS"):
        return []
    try:
        from Cython.Build import cythonize
    except ImportError:
        cythonize = None
    if cythonize is not None and os.path.exists(PYX):
        return cythonize(
            [Extension(NAME, [PYX], extra_compile_args=COMPILE_ARGS)],
            compiler_directives={
                "language_level": "3",
                # Safety stays on (bounds checks are explicit in the code); these only drop
                # Python-level semantics the scanner never relies on.
                "cdivision": True,
                "embedsignature": True,
            },
        )
    if os.path.exists(GENERATED_C):
        return [Extension(NAME, [GENERATED_C], extra_compile_args=COMPILE_ARGS)]
    if _require():
        raise SystemExit("stompfast: neither Cython nor stompfast/_scanner_c.c is available to build the scanner")
    _warn("neither Cython nor the generated stompfast/_scanner_c.c is available")
    return []


setup(ext_modules=_extensions(), cmdclass={"build_ext": OptionalBuildExt})
