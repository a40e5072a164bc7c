"""Helpers shared by train_bench.py and train_check.py: the device (or a
clear exit 2), the versions a result records, optional packages, JSON
written atomically, a normwise relative error."""

import json
import os
import platform
import sys


def die(message, code=2):
    print(f"{os.path.basename(sys.argv[0])}: {message}", file=sys.stderr)
    sys.exit(code)


def import_torch():
    try:
        import torch
    except Exception as e:  # noqa: BLE001 - any import failure is the same error
        die(f"cannot import torch ({type(e).__name__}: {e})")
    return torch


def device_of(name):
    """torch.device for --device: cuda needs a CUDA device (exit 2 without)."""
    torch = import_torch()
    if name == "cuda" and not torch.cuda.is_available():
        die(
            f"no CUDA device (torch {torch.__version__}, torch.cuda.is_available() "
            "is False); use --device cpu where the tool offers it"
        )
    return torch.device(name)


def package_version(name):
    try:
        from importlib import metadata

        return metadata.version(name)
    except Exception:  # noqa: BLE001 - not installed, or no metadata
        return None


def optional_module(module):
    """(module, None), or (None, why it cannot be imported)."""
    import importlib

    try:
        return importlib.import_module(module), None
    except Exception as e:  # noqa: BLE001 - the reason is reported
        return None, f"{module} is not importable ({type(e).__name__}: {e})"


def environment(device):
    torch = import_torch()
    env = {
        "python": platform.python_version(),
        "torch": torch.__version__,
        "cuda": torch.version.cuda,
        "device": torch.cuda.get_device_name(device) if device.type == "cuda" else "cpu",
        "lanefold": package_version("lanefold"),
        "liger": package_version("liger-kernel") or package_version("liger_kernel"),
        "quack": package_version("quack-kernels") or package_version("quack_kernels"),
        "transformers": package_version("transformers"),
        "argv": sys.argv,
    }
    try:
        import lanefold

        env["lanefold_path"] = os.path.dirname(lanefold.__file__)
    except Exception as e:  # noqa: BLE001
        env["lanefold_path"] = f"not importable: {type(e).__name__}: {e}"
    return env


def write_json(path, obj):
    """Write obj as JSON at path atomically (temp file, then rename)."""
    tmp = f"{path}.tmp-{os.getpid()}"
    with open(tmp, "w") as f:
        json.dump(obj, f, indent=1)
        f.write("\n")
    os.replace(tmp, path)


def rel_err(got, want):
    """||got - want|| / ||want|| in float64 (want's norm floored at 1e-30)."""
    got, want = got.detach().double(), want.detach().double()
    return float((got - want).norm() / want.norm().clamp_min(1e-30))
