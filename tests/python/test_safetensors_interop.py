"""keel's C++ safetensors I/O against the reference implementation (the
`safetensors` package), in both directions.

The C++ half is the `Interop.*` tests of the GoogleTest program
test_safetensors (tests/checkpoint/test_safetensors.cpp), which write or read
files in $KEEL_INTEROP_DIR. Both sides build the same tensors from a formula,
so each can check the other's file bit for bit.

Needs the C++ build: the program is looked up in $KEEL_BUILD_DIR (default
"build", relative to the repository root) under tests/.
"""
import json
import os
import struct
import subprocess
from pathlib import Path

import numpy as np
import torch
from safetensors import safe_open
from safetensors.torch import load_file, save_file

from keel_testlib import cpp_test_program


def run_cpp(test_name: str, interop_dir: Path) -> None:
    env = dict(os.environ, KEEL_INTEROP_DIR=str(interop_dir))
    result = subprocess.run(
        [str(cpp_test_program("test_safetensors")), f"--gtest_filter=Interop.{test_name}"],
        env=env, capture_output=True, text=True, timeout=300)
    output = result.stdout + result.stderr
    assert result.returncode == 0, output
    # A skipped or filtered-out test would also exit 0.
    assert "[  PASSED  ] 1 test." in output, output


def expected_tensors() -> dict:
    """The formula of interop_tensors() in test_safetensors.cpp."""
    def base(*shape):
        n = int(np.prod(shape)) if shape else 1
        return torch.arange(1, 1 + n, dtype=torch.float64).reshape(shape)
    return {
        "f64": base(2, 3) * 0.37 - 1.0,
        "f32": (base(4, 3) * 0.37 - 2.0).to(torch.float32),
        "bf16": (base(3, 4) * 0.37 - 2.0).to(torch.bfloat16),
        "f16": (base(5) * 0.37 - 1.0).to(torch.float16),
        "i64": (base(2, 2) * 1e10 - 3e10).to(torch.int64),
        "i32": (base(7) * 1000 - 3000).to(torch.int32),
        "u8": (base(2, 5) * 23).remainder(256).to(torch.uint8),
        "bool": base(6).remainder(3).eq(0),
        "scalar": torch.tensor(3.5, dtype=torch.float32),
        "empty": torch.zeros(0, 3, dtype=torch.float32),
        "specials": torch.tensor([0.0, -0.0, float("inf"), float("-inf"), float("nan")]),
    }


def assert_bit_equal(got: torch.Tensor, want: torch.Tensor, name: str) -> None:
    assert got.dtype == want.dtype, name
    assert got.shape == want.shape, name
    assert torch.equal(got.contiguous().reshape(-1).view(torch.uint8),
                       want.contiguous().reshape(-1).view(torch.uint8)), name


def test_python_reads_file_written_by_cpp(tmp_path):
    run_cpp("WriteFileForPython", tmp_path)
    path = tmp_path / "from_cpp.safetensors"
    want = expected_tensors()

    # PyTorch side: names, dtypes, shapes, bytes.
    got = load_file(str(path))
    assert sorted(got) == sorted(want)
    for name, tensor in want.items():
        assert_bit_equal(got[name], tensor, name)

    with safe_open(str(path), framework="pt") as f:
        assert f.metadata() == {"writer": "keel", "step": "123"}

    # NumPy side (no bfloat16 in NumPy).
    with safe_open(str(path), framework="np") as f:
        for name, tensor in want.items():
            if tensor.dtype == torch.bfloat16:
                continue
            array = f.get_tensor(name)
            assert array.shape == tuple(tensor.shape), name
            np.testing.assert_array_equal(array, tensor.numpy(), err_msg=name)

    # Layout: header padded to 8 bytes, tensors in the order written.
    raw = path.read_bytes()
    (n,) = struct.unpack("<Q", raw[:8])
    assert n % 8 == 0
    header = json.loads(raw[8:8 + n])
    assert [k for k in header if k != "__metadata__"] == list(want)


def test_cpp_reads_file_written_by_python(tmp_path):
    save_file(expected_tensors(), str(tmp_path / "from_python.safetensors"),
              metadata={"writer": "python", "step": "456"})
    run_cpp("ReadFileFromPython", tmp_path)
