"""Drop-in norm modules and :func:`swap_norms`.

:class:`LayerNorm` and :class:`RMSNorm` subclass torch.nn's: the same
constructor arguments, parameters (``weight``, ``bias``) and state_dict
keys. Their forward runs lanefold's op (and their backward lanefold's
backward ops); it falls back to torch's own forward where lanefold's cannot
serve: an unsupported dtype or device, or parameters whose dtype or
device differ from the input's.
"""

import math
from typing import Optional

import torch

from . import _ops

__all__ = ["LayerNorm", "RMSNorm", "swap_norms"]


def _fast_ok(x, *params) -> bool:
    if not isinstance(x, torch.Tensor) or x.dtype not in _ops.SUPPORTED_DTYPES:
        return False
    if x.device.type not in ("cpu", "cuda") or x.dim() == 0 or x.numel() == 0:
        return False
    dtype, device = x.dtype, x.device
    for p in params:
        if p is not None and (p.dtype != dtype or p.device != device):
            return False
    return True


def _flat(x: torch.Tensor, normalized_shape) -> Optional[torch.Tensor]:
    """x with its normalized trailing dims flattened into one, or None."""
    k = len(normalized_shape)
    if x.dim() < k or tuple(x.shape[x.dim() - k :]) != tuple(normalized_shape):
        return None
    n = math.prod(normalized_shape)
    return x.reshape(tuple(x.shape[: x.dim() - k]) + (n,))


class LayerNorm(torch.nn.LayerNorm):
    """torch.nn.LayerNorm whose forward is lanefold's layer_norm."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        weight, bias = self.weight, self.bias
        if len(self.normalized_shape) == 1 and _fast_ok(x, weight, bias):
            # The common case, without flattening: the function checks shapes.
            if x.shape[-1:] == self.normalized_shape:
                return _ops.layer_norm(x, weight, bias, self.eps)
        if _fast_ok(x, weight, bias):
            xf = _flat(x, self.normalized_shape)
            if xf is not None:
                w = None if self.weight is None else self.weight.reshape(-1)
                b = None if self.bias is None else self.bias.reshape(-1)
                return _ops.layer_norm(xf, w, b, self.eps).view(x.shape)
        return super().forward(x)


_TorchRMSNorm = getattr(torch.nn, "RMSNorm", None)

if _TorchRMSNorm is None:  # torch < 2.4: a module with the same interface

    class _TorchRMSNorm(torch.nn.Module):  # type: ignore[no-redef]
        def __init__(
            self, normalized_shape, eps=None, elementwise_affine=True, device=None, dtype=None
        ):
            super().__init__()
            if isinstance(normalized_shape, int):
                normalized_shape = (normalized_shape,)
            self.normalized_shape = tuple(normalized_shape)
            self.eps = eps
            self.elementwise_affine = elementwise_affine
            if elementwise_affine:
                self.weight = torch.nn.Parameter(
                    torch.ones(self.normalized_shape, device=device, dtype=dtype)
                )
            else:
                self.register_parameter("weight", None)

        def forward(self, x):
            dims = tuple(range(-len(self.normalized_shape), 0))
            eps = self.eps if self.eps is not None else torch.finfo(x.dtype).eps
            y = x * torch.rsqrt(x.pow(2).mean(dims, keepdim=True) + eps)
            return y * self.weight if self.weight is not None else y


class RMSNorm(_TorchRMSNorm):
    """torch.nn.RMSNorm whose forward is lanefold's rms_norm.

    As torch's, ``eps=None`` means ``torch.finfo(x.dtype).eps``.
    """

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        weight = self.weight
        if len(self.normalized_shape) == 1 and _fast_ok(x, weight):
            if x.shape[-1:] == self.normalized_shape:
                eps = self.eps if self.eps is not None else torch.finfo(x.dtype).eps
                return _ops.rms_norm(x, weight, eps)
        if _fast_ok(x, self.weight):
            xf = _flat(x, self.normalized_shape)
            if xf is not None:
                eps = self.eps if self.eps is not None else torch.finfo(x.dtype).eps
                w = None if self.weight is None else self.weight.reshape(-1)
                return _ops.rms_norm(xf, w, eps).view(x.shape)
        fallback = getattr(self, "_lanefold_fallback", None)
        if fallback is not None:
            return fallback(x)
        return super().forward(x)


def _adopt(old: torch.nn.Module, cls) -> torch.nn.Module:
    """A ``cls`` instance with ``old``'s state: the same parameter objects,
    buffers, hooks and training flag."""
    new = cls.__new__(cls)
    new.__dict__ = dict(old.__dict__)
    return new


def _hf_rms_norm(m: torch.nn.Module) -> bool:
    """A transformers-style RMSNorm (e.g. LlamaRMSNorm): ``weight`` of one
    dim and ``variance_epsilon``."""
    w = getattr(m, "weight", None)
    return (
        type(m).__name__.endswith("RMSNorm")
        and not isinstance(m, RMSNorm)
        and isinstance(w, torch.nn.Parameter)
        and w.dim() == 1
        and isinstance(getattr(m, "variance_epsilon", None), (int, float))
    )


def _replacement(m: torch.nn.Module) -> Optional[torch.nn.Module]:
    if type(m) is torch.nn.LayerNorm:
        return _adopt(m, LayerNorm)
    if getattr(torch.nn, "RMSNorm", None) is not None and type(m) is torch.nn.RMSNorm:
        return _adopt(m, RMSNorm)
    if _hf_rms_norm(m):
        w = m.weight
        new = RMSNorm(tuple(w.shape), eps=float(m.variance_epsilon), device="meta")
        new.weight = w
        new.train(m.training)
        # The original forward serves where lanefold's cannot (e.g. an
        # float32 weight on bfloat16 activations, whose product is float32
        # there); kept outside the module tree so state_dict is unchanged.
        new.__dict__["_lanefold_fallback"] = m
        return new
    return None


def swap_norms(model: torch.nn.Module) -> torch.nn.Module:
    """Replace, in place, every torch.nn.LayerNorm and torch.nn.RMSNorm in
    ``model`` (exact types: subclasses may have their own forward) and every
    transformers-style ``*RMSNorm`` with ``.weight`` and
    ``.variance_epsilon`` by lanefold's modules, sharing their parameters:
    the state_dict keeps its keys and tensors. Returns the model (a new
    module only where ``model`` itself is a norm)."""
    top = _replacement(model)
    if top is not None:
        return top
    for parent in list(model.modules()):
        for name, child in list(parent.named_children()):
            new = _replacement(child)
            if new is not None:
                setattr(parent, name, new)
    return model
