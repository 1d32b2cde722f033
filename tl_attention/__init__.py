"""TL kernels from PyTorch: `tl_attention.compile(path_or_text)` returns a callable kernel backed by the
`tl_attention::forward` custom op (fake kernel, autograd, `torch.compile`, CUDA graphs). docs/pytorch.md."""

from tl_attention.backward import BackwardUnavailable, register_backward_provider
from tl_attention.decode import DecodeKernel, compile_decode
from tl_attention.kernel import Kernel, TLBuildError, TLError, compile, device_family, load_many

__all__ = [
    "BackwardUnavailable",
    "DecodeKernel",
    "Kernel",
    "TLBuildError",
    "TLError",
    "compile",
    "compile_decode",
    "device_family",
    "load_many",
    "register_backward_provider",
]
