"""Run one generated CUDA kernel of plain C++ on the CPU: every CUDA thread of a block is an OS thread,
`__shfl*_sync` and `__syncthreads` are barriers, `__shared__` is one copy per block. For kernels without
CuTe, tensor cores or async copies (the split-KV combine), so the generated source itself is executed in
CI, which has no GPU; the blocks of a grid run one after another.

`build(kernel_source, name, params)` compiles it with g++ into a shared library whose `launch(grid,
block, args...)` runs the grid; `params` are the kernel's (name, C type) in order, as `runner.abi` lists
them. Element types are float: the arithmetic is checked, not the final rounding to fp16/bf16.
"""

from __future__ import annotations

import ctypes
import hashlib
import shutil
import subprocess
import tempfile
from collections.abc import Sequence
from pathlib import Path

PRELUDE = r"""
#include <barrier>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <memory>
#include <thread>
#include <vector>

struct uint3_ { unsigned x, y, z; };
static thread_local uint3_ threadIdx, blockIdx;
struct float4 { float x, y, z, w; };
static inline float4 make_float4(float x, float y, float z, float w) { return {x, y, z, w}; }
static inline float __int_as_float(int i) { float f; std::memcpy(&f, &i, 4); return f; }
namespace cute { using bfloat16_t = float; using half_t = float; }

struct Warp {
  std::barrier<> bar{32};
  float vals[32];
};
static thread_local Warp* tl_warp;
static thread_local std::barrier<>* tl_block;

static float exchange(float v, int src) {
  const int lane = threadIdx.x % 32;
  tl_warp->vals[lane] = v;
  tl_warp->bar.arrive_and_wait();
  const float r = tl_warp->vals[src & 31];
  tl_warp->bar.arrive_and_wait();
  return r;
}
static inline float __shfl_sync(unsigned, float v, int src) { return exchange(v, src); }
static inline float __shfl_xor_sync(unsigned, float v, int mask) {
  return exchange(v, (threadIdx.x % 32) ^ mask);
}
static inline void __syncthreads() { tl_block->arrive_and_wait(); }

#define __global__
#define __launch_bounds__(n)
#define __shared__ static
#define CUTE_UNROLL
#define CUTE_NO_UNROLL
"""

LAUNCH = r"""
extern "C" void launch(int grid, int block{params}) {{
  for (int b = 0; b < grid; ++b) {{
    std::barrier<> block_bar(block);
    std::vector<std::unique_ptr<Warp>> warps;
    for (int w = 0; w < (block + 31) / 32; ++w) warps.push_back(std::make_unique<Warp>());
    std::vector<std::thread> threads;
    for (int t = 0; t < block; ++t)
      threads.emplace_back([&, t] {{
        threadIdx = {{static_cast<unsigned>(t), 0, 0}};
        blockIdx = {{static_cast<unsigned>(b), 0, 0}};
        tl_warp = warps[t / 32].get();
        tl_block = &block_bar;
        {name}({args});
      }});
    for (auto& th : threads) th.join();
  }}
}}
"""

_CTYPES = {"int": ctypes.c_int, "long long": ctypes.c_longlong, "float": ctypes.c_float}


def kernel_text(source: str, name: str) -> str:
    """The `extern "C" __global__` function `name` of a generated source, through its closing brace."""
    start = source.index(f"{name}(")
    start = source.rindex('extern "C"', 0, start)
    depth, i = 0, source.index("{", source.index(")", start))
    while True:
        ch = source[i]
        depth += ch == "{"
        depth -= ch == "}"
        i += 1
        if depth == 0:
            return source[start:i]


def build(source: str, name: str, params: Sequence[tuple[str, str]]) -> ctypes.CDLL:
    """Compile kernel `name` of `source` with the prelude; returns the library (its `launch` typed)."""
    if shutil.which("g++") is None:
        raise RuntimeError("g++ is needed to emulate a kernel on the CPU")
    body = kernel_text(source, name)
    decl = "".join(f", {ctype} {pname}" for pname, ctype in params)
    code = PRELUDE + body + LAUNCH.format(params=decl, name=name, args=", ".join(p for p, _ in params))
    tag = hashlib.sha256(code.encode()).hexdigest()[:16]
    out = Path(tempfile.gettempdir()) / f"tl-warp-emulator-{tag}.so"
    if not out.exists():
        src = out.with_suffix(".cpp")
        src.write_text(code)
        part = out.with_suffix(".part")
        cmd = ["g++", "-std=c++20", "-O1", "-shared", "-fPIC", "-pthread", "-o", str(part), str(src)]
        subprocess.run(cmd, check=True, capture_output=True, text=True)
        part.replace(out)
    lib = ctypes.CDLL(str(out))
    lib.launch.restype = None
    lib.launch.argtypes = [ctypes.c_int, ctypes.c_int] + [
        ctypes.c_void_p if ctype.endswith("*") else _CTYPES[ctype] for _, ctype in params
    ]
    return lib
