"""Compiled token kernels for ``ar``, the one decision that reads every token of a batch.

``ar`` needs each row's sum of p_t = exp(old_log_prob_t) over its valid tokens, then writes
the [B, T] weights A_r * p_t + C_r. Eager torch spends several passes over the [B, T] tensor
on each (exp, mask, sum; exp, scale, mask) and always covers the padding; the kernels in
``token_kernels.c`` do each in one vectorized loop per row over its valid tokens only. On this
project's CPU (``benchmarks/strategy_overhead.py``) the decision plus writing its weights into
a host buffer costs 1.3-1.5x one fused read-and-write pass over the tensor (with per-response
advantages), against 5-8x eagerly.

The C file is compiled on first use with the system C compiler (``$CC``, else ``cc``, ``gcc``
or ``clang``; ~0.3 s) into a cache folder (``$DATAFLEX_RL_CACHE``, else
``$XDG_CACHE_HOME/dataflex-rl``, else ``~/.cache/dataflex-rl``), named by a hash of the source,
the flags and the machine type, and written atomically, so processes that start together share
one build; a cached build is used without a compiler. When none can be built or loaded (no
compiler, an unwritable cache) `load_token_kernels` raises `NativeUnavailable` and `Strategy`
falls back to torch with a warning (or refuses, with ``native=True``), also when a pickled
strategy arrives in a process that cannot load them.

Kernels take CPU, contiguous float32 log-probs of right-padded rows (row r's valid tokens are
its first ``lengths[r]``; `TokenBlocks.prefix_lengths` tells). Their exp is a polynomial with
a relative error of about 1.3 float ulp (measured in the tests), so sums and weights agree with
torch's to ~2e-7 relative. A row with a value outside [-87, 0] (a NaN, an infinity, a
log-prob > 0, or one whose exp is subnormal) is flagged *odd*; callers redo those rows exactly
in torch.
"""

from __future__ import annotations

import ctypes
import hashlib
import os
import platform
import shlex
import shutil
import subprocess
import tempfile
from dataclasses import dataclass
from pathlib import Path

import torch
from torch import Tensor

#: the kernels' source, shipped with the package
SOURCE = Path(__file__).with_name("token_kernels.c")
#: compiler flags: optimized, position-independent, no errno or trap semantics on math (so
#: loops vectorize) but IEEE arithmetic (no -ffast-math: NaN must stay detectable)
FLAGS = ("-O3", "-fPIC", "-shared", "-fno-math-errno", "-fno-trapping-math", "-fopenmp-simd")
_P, _I = ctypes.c_void_p, ctypes.c_int64


class NativeUnavailable(RuntimeError):
    """The kernels cannot be built or loaded here (no C compiler, a failed build)."""


def cache_dir() -> Path:
    """Where built kernels are kept: ``$DATAFLEX_RL_CACHE``, else
    ``$XDG_CACHE_HOME/dataflex-rl``, else ``~/.cache/dataflex-rl``."""
    if d := os.environ.get("DATAFLEX_RL_CACHE"):
        return Path(d)
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "dataflex-rl"


def find_compiler() -> list[str]:
    """The C compiler command: ``$CC`` when set (a command line, e.g. ``ccache gcc``), else
    the first of cc, gcc, clang on the PATH."""
    if cc := os.environ.get("CC"):
        cmd = shlex.split(cc)
        path = shutil.which(cmd[0]) if cmd else None
        if path is None:
            raise NativeUnavailable(f"$CC is {cc!r}, which is not on the PATH")
        return [path, *cmd[1:]]
    for name in ("cc", "gcc", "clang"):
        if path := shutil.which(name):
            return [path]
    raise NativeUnavailable("no C compiler found (set $CC, or install gcc or clang)")


def arch_flags() -> tuple[str, ...]:
    """``-mavx2 -mfma`` on an x86-64 CPU that has both (8 floats per instruction instead of
    4); nothing elsewhere (the compiler's baseline for the machine)."""
    if platform.machine().lower() not in ("x86_64", "amd64"):
        return ()
    try:
        info = Path("/proc/cpuinfo").read_text()
    except OSError:
        return ()
    flags = next(
        (ln.split(":", 1)[1].split() for ln in info.splitlines() if ln.startswith("flags")), []
    )
    return ("-mavx2", "-mfma") if {"avx2", "fma"} <= set(flags) else ()


def build(cache: Path | None = None, arch: tuple[str, ...] | None = None) -> Path:
    """The shared library in ``cache`` (default `cache_dir`), compiled with ``arch`` flags
    (default `arch_flags`) unless a build of the same source and flags for this machine is
    there already: a cached build is used without looking for a compiler (delete the cache
    folder to rebuild with another one)."""
    flags = FLAGS + (arch_flags() if arch is None else tuple(arch))
    source = SOURCE.read_bytes()
    key = hashlib.sha256(
        b"\0".join([source, " ".join(flags).encode(), platform.machine().encode()])
    ).hexdigest()[:16]
    folder = (cache or cache_dir()) / "kernels"
    lib = folder / f"token_kernels-{key}.so"
    if lib.exists():
        return lib
    cc = find_compiler()
    tmp = None
    try:
        folder.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=folder, prefix=".build-", suffix=".so")
        os.close(fd)
        done = subprocess.run(
            [*cc, *flags, str(SOURCE), "-o", tmp], capture_output=True, text=True, timeout=120
        )
        if done.returncode != 0:
            msg = (done.stderr or done.stdout).strip().splitlines()[:5]
            raise NativeUnavailable(f"{' '.join(cc)} failed on {SOURCE.name}: " + " | ".join(msg))
        os.replace(tmp, lib)  # atomic: a concurrent build of the same key writes the same file
    except (OSError, subprocess.SubprocessError) as e:
        raise NativeUnavailable(
            f"building {SOURCE.name} with {' '.join(cc)} in {folder} failed: {e}"
        ) from None
    finally:
        if tmp is not None and os.path.exists(tmp):
            os.unlink(tmp)
    return lib


def load_token_kernels(
    cache: Path | None = None, arch: tuple[str, ...] | None = None
) -> TokenKernels:
    """Build (when needed, see `build`) and load the kernels; `NativeUnavailable` says why
    they cannot be."""
    path = build(cache, arch)
    try:
        lib = ctypes.CDLL(str(path))
    except OSError as e:
        raise NativeUnavailable(f"cannot load {path}: {e}") from None
    lib.dfx_exp.argtypes = [_P, _I, _P]
    lib.dfx_prob_row_sums.argtypes = [_P, _P, _I, _I, _P, _P]
    lib.dfx_affine_prob.argtypes = [_P, _P, _I, _I, _P, _P, _P]
    lib.dfx_prefix_lengths.argtypes = [_P, _I, _I, _P]
    lib.dfx_row_sums.argtypes = [_P, _P, _I, _I, _P]
    lib.dfx_prefix_lengths.restype = ctypes.c_int64
    for f in (lib.dfx_exp, lib.dfx_prob_row_sums, lib.dfx_affine_prob, lib.dfx_row_sums):
        f.restype = None
    return TokenKernels(lib, path)


def _ptr(t: Tensor) -> int:
    return t.data_ptr()


@dataclass(frozen=True)
class TokenKernels:
    """The loaded kernels (a handle; no state of its own). A pickled copy (a `Strategy` sent
    to another process) loads them again there, building them if that machine has no build."""

    lib: ctypes.CDLL
    path: Path

    def __reduce__(self):
        return (load_token_kernels, ())

    @staticmethod
    def supports(x: Tensor | None) -> bool:
        """Whether the kernels take ``x``: a CPU, contiguous float32 [B, T] tensor."""
        return (
            x is not None
            and x.device.type == "cpu"
            and x.dtype == torch.float32
            and x.dim() == 2
            and x.is_contiguous()
        )

    def exp(self, x: Tensor) -> Tensor:
        """The kernels' exp of ``x`` (clamped into [-87, 0]), a new tensor: for tests."""
        x = x.detach().to(torch.float32).contiguous()
        out = torch.empty_like(x)
        self.lib.dfx_exp(_ptr(x), x.numel(), _ptr(out))
        return out

    def prefix_lengths(self, mask: Tensor) -> Tensor | None:
        """[B] int64 valid tokens per row when every row of the [B, T] bool ``mask`` is
        right-padded (its valid tokens first), else None; one pass over the mask."""
        if mask.dtype != torch.bool or mask.dim() != 2:
            raise ValueError("prefix_lengths needs a [B, T] bool mask")
        m = mask.to("cpu").contiguous()
        B, T = m.shape
        n = torch.empty(B, dtype=torch.int64)
        hole = self.lib.dfx_prefix_lengths(_ptr(m), B, T, _ptr(n))
        return None if hole >= 0 else n

    @staticmethod
    def _lengths(x: Tensor, lengths: Tensor) -> Tensor:
        B, T = x.shape
        n = lengths.to(device="cpu", dtype=torch.int64).contiguous()
        if n.shape != (B,) or (n.numel() and (int(n.min()) < 0 or int(n.max()) > T)):
            raise ValueError(f"lengths must be [{B}] in [0, {T}], got {tuple(n.shape)}")
        return n

    def row_sums(self, x: Tensor, lengths: Tensor) -> Tensor:
        """[B] float64 sum of x[r, :lengths[r]] (non-finite when one of them is)."""
        if not self.supports(x):
            raise ValueError("row_sums needs a CPU, contiguous float32 [B, T] tensor")
        n = self._lengths(x, lengths)
        B, T = x.shape
        sums = torch.empty(B, dtype=torch.float64)
        self.lib.dfx_row_sums(_ptr(x), _ptr(n), B, T, _ptr(sums))
        return sums

    def prob_row_sums(self, x: Tensor, lengths: Tensor) -> tuple[Tensor, Tensor]:
        """([B] float64 sum of exp(x[r, :lengths[r]]), [B] bool odd rows: a value outside
        [-87, 0] there, so the row's sum is not exact and must be redone)."""
        if not self.supports(x):
            raise ValueError("prob_row_sums needs a CPU, contiguous float32 [B, T] tensor")
        n = self._lengths(x, lengths)
        B, T = x.shape
        sums = torch.empty(B, dtype=torch.float64)
        odd = torch.empty(B, dtype=torch.uint8)
        self.lib.dfx_prob_row_sums(_ptr(x), _ptr(n), B, T, _ptr(sums), _ptr(odd))
        return sums, odd.bool()

    def affine_prob(self, x: Tensor, lengths: Tensor, A: Tensor, C: Tensor, out: Tensor) -> Tensor:
        """``out[r, t]`` = A[r] * exp(x[r, t]) + C[r] for t < lengths[r], 0 after (all 0 on a
        row with A[r] = C[r] = 0). Odd rows hold exp of the clamped value: redo them."""
        if not (self.supports(x) and self.supports(out) and out.shape == x.shape):
            raise ValueError("affine_prob needs CPU, contiguous float32 [B, T] x and out")
        n = self._lengths(x, lengths)
        B, T = x.shape
        A = A.to(device="cpu", dtype=torch.float32).contiguous()
        C = C.to(device="cpu", dtype=torch.float32).contiguous()
        if A.shape != (B,) or C.shape != (B,):
            raise ValueError(f"A and C must be [{B}]")
        self.lib.dfx_affine_prob(_ptr(x), _ptr(n), B, T, _ptr(A), _ptr(C), _ptr(out))
        return out
