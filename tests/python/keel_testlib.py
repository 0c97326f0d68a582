"""What every Python test needs of the C++ build: where it is and how to run
keel. The binary is $KEEL_BINARY, else $KEEL_BUILD_DIR/keel (build dir
default "build", relative to the repository)."""
import os
import subprocess
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]


def build_dir() -> Path:
    build = Path(os.environ.get("KEEL_BUILD_DIR", "build"))
    return build if build.is_absolute() else REPO / build


def keel_binary() -> Path:
    path = Path(os.environ["KEEL_BINARY"]) if os.environ.get("KEEL_BINARY") else build_dir() / "keel"
    if not path.exists():
        pytest.fail(f"{path} not found: build keel first (or set KEEL_BINARY / KEEL_BUILD_DIR)")
    return path


def cpp_test_program(name: str) -> Path:
    """A C++ test program of the same build (build/tests/NAME), which some
    Python tests drive as a helper through an Interop.* test."""
    path = build_dir() / "tests" / name
    if not path.exists():
        pytest.fail(f"{path} not found: build the C++ tests first (or set KEEL_BUILD_DIR)")
    return path


def keel(*args, expect_rc=0, cwd=None, timeout=600) -> subprocess.CompletedProcess:
    """Runs keel with `args`; fails the test unless it exits with `expect_rc`."""
    result = subprocess.run([str(keel_binary()), *map(str, args)], capture_output=True, text=True,
                            timeout=timeout, cwd=cwd)
    assert result.returncode == expect_rc, f"keel {' '.join(map(str, args))} -> {result.returncode}\n" \
        f"{result.stdout}\n{result.stderr}"
    return result
