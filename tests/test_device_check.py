"""scripts/device_check.sh: the prepared GPU run refuses a machine without a CUDA device in one line
(exit 2, nothing written), and is valid bash."""

import subprocess
import sys
from pathlib import Path

import pytest

SCRIPT = Path(__file__).resolve().parents[1] / "scripts" / "device_check.sh"


def test_the_script_is_valid_bash():
    assert subprocess.run(["bash", "-n", str(SCRIPT)], capture_output=True, text=True).returncode == 0


def test_without_a_cuda_device_it_refuses_in_one_line_and_writes_nothing(tmp_path):
    torch = pytest.importorskip("torch")
    if torch.cuda.is_available():
        pytest.skip("this machine has a CUDA device")
    res = subprocess.run(["bash", str(SCRIPT), "--quick", "out"], cwd=tmp_path, capture_output=True, text=True,
                         env={"PATH": "/usr/bin:/bin", "PYTHON": sys.executable}, timeout=120)
    assert res.returncode == 2 and res.stdout == "", (res.stdout, res.stderr)
    assert res.stderr.count("\n") == 1 and res.stderr.startswith("error: device: no CUDA device"), res.stderr
    assert not (tmp_path / "out").exists()
