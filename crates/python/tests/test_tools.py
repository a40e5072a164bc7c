"""The training tools (tools/train_bench.py, tools/train_check.py) run on
the CPU: train_bench's gradient check against float64, train_check's
training runs and plot on a tiny model, their clear exits without CUDA."""

import csv
import json
import os
import subprocess
import sys

import pytest
import torch

TOOLS = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tools")


def tool(name, *args, timeout=600):
    return subprocess.run(
        [sys.executable, os.path.join(TOOLS, name), *args],
        capture_output=True,
        text=True,
        timeout=timeout,
    )


def test_train_bench_check_on_cpu_passes_and_records_every_gradient(tmp_path):
    r = tool(
        "train_bench.py", "--check", "--device", "cpu", "--sides", "lanefold,torch-eager,liger",
        "--shapes", "19x300", "--ce-shapes", "17x500", "--output", str(tmp_path),
    )
    assert r.returncode == 0, r.stdout + r.stderr
    doc = json.load(open(tmp_path / "check.json"))
    checked = [c for c in doc["check"] if "pass" in c]
    # 4 ops x 2 dtypes x 2 sides; Liger (CUDA only) is skipped with a reason.
    assert len(checked) == 16, doc["check"]
    assert all(c["pass"] for c in checked)
    skipped = [c for c in doc["check"] if "skipped" in c]
    assert len(skipped) == 8 and all("liger" in c["case"] for c in skipped)
    grads = {k for c in checked if c["case"].startswith("layer_norm") for k in c["rel_err"]}
    assert grads == {"output", "dx", "dweight", "dbias"}


def test_train_bench_check_fails_past_the_tolerance(tmp_path):
    # The same gradients cannot meet a tolerance below float32's rounding.
    code = (
        "import sys; sys.argv = sys.argv[1:]; "
        "import train_bench; train_bench.TOLERANCE['f32'] = 1e-12; "
        "sys.exit(train_bench.main())"
    )
    r = subprocess.run(
        [sys.executable, "-c", code, "train_bench.py", "--check", "--device", "cpu",
         "--sides", "lanefold", "--ops", "softmax", "--dtypes", "f32", "--shapes", "5x64"],
        capture_output=True, text=True, cwd=TOOLS, timeout=300,
    )
    assert r.returncode == 1, r.stdout + r.stderr
    assert "FAILED" in r.stdout


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the exit without CUDA")
def test_tools_without_cuda_exit_2_with_a_reason():
    for name, args in (("train_bench.py", ()), ("train_check.py", ("--steps", "1"))):
        r = tool(name, *args)
        assert r.returncode == 2, (name, r.stdout, r.stderr)
        assert "no CUDA device" in r.stderr, r.stderr


def test_bad_arguments_exit_2():
    r = tool("train_bench.py", "--check", "--device", "cpu", "--shapes", "4096by4096")
    assert r.returncode == 2 and "ROWSxN" in r.stderr, r.stderr
    r = tool("train_bench.py", "--device", "cpu")
    assert r.returncode == 2 and "--check" in r.stderr, r.stderr


def test_train_check_tracks_torch_on_a_tiny_model_and_plots(tmp_path):
    pytest.importorskip("transformers")
    r = tool(
        "train_check.py", "--device", "cpu", "--hidden", "32", "--layers", "1", "--heads", "2",
        "--intermediate", "64", "--vocab", "300", "--active-vocab", "32", "--seq", "16",
        "--batch", "2", "--steps", "12", "--window", "4", "--output", str(tmp_path),
    )
    assert r.returncode == 0, r.stdout + r.stderr
    rows = list(csv.DictReader(open(tmp_path / "losses.csv")))
    assert [int(x["step"]) for x in rows] == list(range(12))
    for x in rows:
        for run in ("torch", "lanefold", "twin"):
            assert 0.0 < float(x[f"{run}_loss"]) < 20.0
    summary = json.load(open(tmp_path / "summary.json"))
    assert summary["runs"]["lanefold"]["norms_swapped"] == 3  # two per layer and the final norm
    assert summary["runs"]["twin"]["norms_swapped"] == 3
    assert summary["within_bound"] is True
    assert summary["max_moving_average_diff_vs_torch"]["lanefold"] <= summary["bound"]
    pytest.importorskip("matplotlib")
    r = tool("train_check.py", "--plot", str(tmp_path), "--window", "4")
    assert r.returncode == 0, r.stdout + r.stderr
    with open(tmp_path / "loss.png", "rb") as f:
        assert f.read(8) == b"\x89PNG\r\n\x1a\n"
