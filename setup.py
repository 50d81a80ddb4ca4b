"""Builds the Cython extension ``stompfast._scanner_c`` and nothing else.

All metadata lives in pyproject.toml. ``STOMPFAST_NO_EXTENSIONS=1`` gives a pure-Python
build (the same variable also makes ``import stompfast`` ignore a built extension).
"""

import os

from setuptools import Extension, setup

ext_modules = []
if not os.environ.get("STOMPFAST_NO_EXTENSIONS"):
    from Cython.Build import cythonize

    ext_modules = cythonize(
        [Extension("stompfast._scanner_c", ["stompfast/_scanner_c.pyx"], extra_compile_args=["-O3"])],
        compiler_directives={
            "language_level": "3",
            # Safety stays on (bounds checks are explicit in the code); these only drop
            # Python-level semantics the scanner never relies on.
            "cdivision": True,
            "embedsignature": True,
        },
    )

setup(ext_modules=ext_modules)
