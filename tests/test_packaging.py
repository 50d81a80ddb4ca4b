"""Packaging: the sdist is complete and tests itself, and installing never needs a compiler or Cython.

Each test builds on one sdist of this checkout (``python -m build --sdist``) and installs
it into a fresh virtualenv: with ``CC=/bin/false`` (no working compiler: the pure-Python
build, with one warning line), and without Cython and without build isolation (the
shipped ``_scanner_c.c`` is compiled). The unpacked sdist then runs some of its own unit
tests against what was installed. The installs fetch setuptools and Cython from the
package index (or pip's cache), as any user's would.
"""

from __future__ import annotations

import glob
import os
import subprocess
import sys
import sysconfig
import tarfile
import venv
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
pytestmark = [pytest.mark.timeout(600)]

if os.environ.get("STOMPFAST_NO_EXTENSIONS"):  # the variable would decide the build, not what we test
    pytest.skip("the packaging tests build both ways themselves", allow_module_level=True)


def _run(*args: str, env: dict | None = None, cwd: Path | None = None) -> subprocess.CompletedProcess:
    done = subprocess.run(list(args), capture_output=True, text=True, env=env, cwd=cwd, timeout=540)
    return done


@pytest.fixture(scope="module")
def sdist(tmp_path_factory: pytest.TempPathFactory) -> Path:
    if not (ROOT / "pyproject.toml").exists():
        pytest.skip("not a source tree")
    out = tmp_path_factory.mktemp("sdist")
    done = _run(sys.executable, "-m", "build", "--sdist", "--outdir", str(out), str(ROOT))
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    (path,) = out.glob("stompfast-*.tar.gz")
    return path


def _venv(where: Path) -> Path:
    """A fresh virtualenv; its python."""
    venv.EnvBuilder(with_pip=True).create(where)
    return where / ("Scripts" if os.name == "nt" else "bin") / "python"


def _site_packages(python: Path) -> Path:
    out = _run(str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])")
    return Path(out.stdout.strip())


def _env(**extra: str) -> dict:
    env = {k: v for k, v in os.environ.items() if not k.startswith("STOMPFAST_") and k != "PYTHONPATH"}
    env.update(extra)
    return env


def test_the_sdist_holds_the_tests_docs_license_and_the_generated_c(sdist: Path) -> None:
    with tarfile.open(sdist) as tar:
        names = {n.split("/", 1)[1] for n in tar.getnames() if "/" in n}
    expected = {"LICENSE", "CHANGELOG.md", "README.md", "SECURITY.md", "setup.py", "pyproject.toml",
                "stompfast/_scanner_c.pyx", "stompfast/_scanner_c.c", "stompfast/py.typed"}
    expected |= {str(p.relative_to(ROOT)) for p in (ROOT / "tests").rglob("*.py") if "__pycache__" not in p.parts}
    expected |= {str(p.relative_to(ROOT)) for p in (ROOT / "docs").glob("*.md")}
    assert not sorted(expected - names)
    assert not [n for n in names if n.endswith((".so", ".pyd", ".pyc"))]


def test_without_a_compiler_the_pure_build_installs_with_one_warning(sdist: Path, tmp_path: Path) -> None:
    python = _venv(tmp_path / "v")
    done = _run(str(python), "-m", "pip", "install", "-v", "--no-deps", str(sdist), env=_env(CC="/bin/false"))
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    said = done.stdout + done.stderr
    assert said.count("WARNING: stompfast: the C scanner is not built") >= 1
    installed = _site_packages(python) / "stompfast"
    assert (installed / "_scanner_py.py").exists()
    # every package of the source tree is installed (pyproject.toml lists them one by one)
    packages = {p.parent.relative_to(ROOT) for p in (ROOT / "stompfast").rglob("__init__.py")
                if "__pycache__" not in p.parts}
    assert not sorted(str(p) for p in packages if not (installed.parent / p / "__init__.py").exists())
    assert not glob.glob(str(installed / "_scanner_c*.so")) + glob.glob(str(installed / "_scanner_c*.pyd"))


def test_without_cython_the_shipped_c_is_compiled(sdist: Path, tmp_path: Path) -> None:
    python = _venv(tmp_path / "v")
    got = _run(str(python), "-m", "pip", "install", "-q", "setuptools>=77", env=_env())
    assert got.returncode == 0, got.stderr[-2000:]
    assert _run(str(python), "-c", "import Cython").returncode != 0  # no Cython here
    done = _run(str(python), "-m", "pip", "install", "--no-build-isolation", "--no-deps", str(sdist), env=_env())
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    suffix = sysconfig.get_config_var("EXT_SUFFIX")
    assert (_site_packages(python) / "stompfast" / f"_scanner_c{suffix}").exists()


def test_the_unpacked_sdist_runs_its_unit_tests_against_the_installed_package(sdist: Path, tmp_path: Path) -> None:
    python = _venv(tmp_path / "v")
    done = _run(str(python), "-m", "pip", "install", "-q", "--no-deps", str(sdist), env=_env())
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    # the test tools come from this environment, after the venv's own site-packages
    ours = sysconfig.get_paths()["purelib"]
    (_site_packages(python) / "zz-test-tools.pth").write_text(ours + "\n")
    with tarfile.open(sdist) as tar:
        tar.extractall(tmp_path / "src", filter="data") if sys.version_info >= (3, 12) else tar.extractall(
            tmp_path / "src")
    (src,) = (tmp_path / "src").iterdir()
    tests = [str(src / "tests" / name) for name in
             ("test_frames.py", "test_encoder.py", "test_protocol.py", "test_config.py", "test_errors.py")]
    run_dir = tmp_path / "elsewhere"  # not the unpacked tree: its stompfast/ must not shadow the installed one
    run_dir.mkdir()
    done = _run(str(python), "-m", "pytest", "-q", "-p", "no:cacheprovider", "-x", *tests, env=_env(), cwd=run_dir)
    assert done.returncode == 0, done.stdout[-4000:] + done.stderr[-2000:]
    where = _run(str(python), "-c", "import stompfast; print(stompfast.__file__)", env=_env(), cwd=run_dir)
    assert where.stdout.startswith(str(tmp_path / "v")), where.stdout
