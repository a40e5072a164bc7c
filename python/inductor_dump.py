#!/usr/bin/env python3
"""Dump what torch.compile generates for one lanefold operator, for reading
side by side with lanefold's kernel (e.g. where torch.compile is faster on a
case and no layout closes the gap).

Usage: python3 python/inductor_dump.py OP DTYPE ROWSxN OUTDIR

Writes OUTDIR/inductor_output_code.py (Inductor's generated Python/Triton),
OUTDIR/chosen_configs.txt (the configuration each autotuned kernel kept),
and copies the Triton artifacts the compilation produced (.ttir, .ptx,
.cubin, .json; from fresh Triton and Inductor cache directories) into
OUTDIR/triton/. The operators are torch_peer's own, so the compiled
function is the one the peer times.
"""

import os
import shutil
import sys
import tempfile


def main():
    if len(sys.argv) != 5:
        sys.exit(__doc__)
    op, dtype_name, shape, out = sys.argv[1:]
    rows, n = (int(v) for v in shape.split("x"))
    os.makedirs(out, exist_ok=True)
    cache = tempfile.mkdtemp(prefix="triton-cache-")
    # Inductor's compile workers keep their Triton artifacts under its own
    # cache directory (none land in the Triton cache): a fresh one.
    inductor_cache = tempfile.mkdtemp(prefix="inductor-cache-")
    os.environ["TORCHINDUCTOR_CACHE_DIR"] = inductor_cache
    # A fresh Triton cache, so what it holds afterwards is this compilation.
    os.environ["TRITON_CACHE_DIR"] = cache
    os.environ["TORCHINDUCTOR_FORCE_DISABLE_CACHES"] = "1"

    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    import torch_peer as peer

    peer.import_torch()
    torch = peer.torch
    if torch is None:
        sys.exit(f"torch is not importable: {peer.IMPORT_ERROR}")

    code = []
    modules = []
    try:
        from torch._inductor.graph import GraphLowering

        compile_to_module = GraphLowering.compile_to_module

        def keep_source(self):
            module = compile_to_module(self)
            modules.append(module)
            path = getattr(module, "__file__", None)
            if path and os.path.exists(path):
                with open(path, encoding="utf-8") as f:
                    code.append(f.read())
            return module

        GraphLowering.compile_to_module = keep_source
    except (ImportError, AttributeError) as e:
        print(f"note: Inductor's module source not captured: {e}", file=sys.stderr)

    a = peer.seeded_inputs(op, dtype_name, rows, n)
    fn = torch.compile(peer.eager_op(op, n), dynamic=False)
    fn(a)
    torch.cuda.synchronize()

    # The configuration each autotuned kernel kept after its first call
    # (the launchers left standing). Introspection of Inductor's private
    # objects: a failure here is reported, never fatal.
    chosen = []
    for module in modules:
        for name, obj in sorted(vars(module).items()):
            try:
                launchers = getattr(obj, "launchers", None) or []
                configs = ", ".join(str(getattr(l, "config", l)) for l in launchers)
                if configs:
                    chosen.append(f"{name}: kept [{configs}]")
            except Exception as e:  # noqa: BLE001
                chosen.append(f"{name}: not readable ({type(e).__name__}: {e})")
    with open(os.path.join(out, "inductor_output_code.py"), "w", encoding="utf-8") as f:
        f.write("\n\n# ---- next module ----\n\n".join(code) if code else "# not captured\n")
    dest = os.path.join(out, "triton")
    os.makedirs(dest, exist_ok=True)
    kept = 0
    walked = [os.walk(cache), os.walk(inductor_cache)]
    for root, _, files in (entry for walk in walked for entry in walk):
        for name in files:
            if name.endswith((".ttir", ".ttgir", ".ptx", ".cubin", ".json")):
                shutil.copy(os.path.join(root, name), os.path.join(dest, name))
                kept += 1
    with open(os.path.join(out, "chosen_configs.txt"), "w", encoding="utf-8") as f:
        f.write("\n".join(chosen) + "\n" if chosen else "# no autotuned kernels found\n")
    print("\n".join(chosen))
    print(f"{op} {dtype_name} {shape}: {len(code)} module(s), {kept} Triton files in {out}")


if __name__ == "__main__":
    main()
