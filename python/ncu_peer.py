"""One call of a PyTorch peer's operator inside the NVTX range "measure",
for Nsight Compute (`ncu --nvtx --nvtx-include measure/`): the same
operator definitions as torch_peer.py, on seeded random inputs, after
warm-up calls that cover torch.compile's (or Quack's) compilation and
autotuning.

Usage: python3 python/ncu_peer.py OP DTYPE ROWSxN eager|compile|quack
"""

import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import torch_peer  # noqa: E402


def main(argv):
    if len(argv) != 4 or argv[3] not in ("eager", "compile", "quack"):
        print(__doc__, file=sys.stderr)
        return 2
    op, dtype_name, shape, mode = argv
    rows, n = (int(v) for v in shape.split("x"))
    torch_peer.import_torch()
    if torch_peer.IMPORT_ERROR:
        print(f"ncu_peer: torch is not importable: {torch_peer.IMPORT_ERROR}", file=sys.stderr)
        return 2
    torch = torch_peer.torch
    if op not in torch_peer.OPS:
        print(f"ncu_peer: unknown op {op!r}", file=sys.stderr)
        return 2
    prepare = None
    if mode == "quack":
        try:
            fn, prepare = torch_peer.quack_op(op, n, torch_peer.storage_dtype(dtype_name), [])
        except torch_peer.Refused as e:
            print(f"ncu_peer: {e}", file=sys.stderr)
            return 2
    else:
        fn = torch_peer.eager_op(op, n)
    inputs = torch_peer.seeded_inputs(op, dtype_name, rows, n)
    if prepare is not None:
        inputs.update(prepare(inputs))
    if mode == "compile":
        fn = torch.compile(fn, dynamic=False)
    for _ in range(3):
        fn(inputs)
    torch.cuda.synchronize()
    torch.cuda.nvtx.range_push("measure")
    fn(inputs)
    torch.cuda.nvtx.range_pop()
    torch.cuda.synchronize()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
