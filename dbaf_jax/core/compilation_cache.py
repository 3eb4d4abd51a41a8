"""The one persistent XLA compilation cache of every entry point.

Every command (training, anonymize, recover, evaluate, sample, the benchmarks) calls
`enable` before its first compile, so a program compiled once on a machine is loaded
from disk by every later run that asks for the same program: a resumed training run,
the next folder of photos, the next benchmark part. On a GPU the cache also keeps
XLA's autotuning results (``jax_persistent_cache_enable_xla_caches``), which are a
large part of a cold compile.

Where: ``$DBAF_JAX_CACHE_DIR`` if set, else ``$XDG_CACHE_HOME/dbaf-jax/xla``, else
``~/.cache/dbaf-jax/xla``. Move it by setting the variable; clear it by deleting the
folder (it is only ever a cache); ``DBAF_JAX_CACHE_DIR=off`` turns it off. A cache
directory JAX was already given (``JAX_COMPILATION_CACHE_DIR``, or a caller's
``jax.config.update``) is left as it is.

`enable` also lowers random draws on a GPU as one kernel each
(``jax_threefry_gpu_kernel_lowering``): XLA otherwise inlines every threefry draw as
dozens of integer ops, and the initialisation of the full networks (thousands of
draws) compiled in 202 s on an H100, in 37 s with the kernels. Same random numbers; no
effect on other backends. Nothing is changed when `dbaf_jax` is imported: a program
that calls the library without `enable` keeps JAX's defaults.

`enable` also turns off XLA:CPU's YNNPACK fusions (`CPU_XLA_FLAGS`, added to
``XLA_FLAGS`` unless that already names the option): with JAX 0.12 they miscompile
bfloat16 convolutions fused with their BatchNorm and ReLU, and the jitted DBAF parser
(`UNetParser`, random weights, 64 px, batch 2) returns NaN logits for most pixels where
the same operations run one by one are finite, so the reduced stage-2 step of
``benchmarks/gpu/quick.sh --reduced`` stopped with ``g_total nan``. Without those
fusions the jitted bfloat16 parser equals the eager one bit for bit; float32 results
on the CPU move by rounding (2.4e-7 on that parser's logits). The option is read when
the CPU backend starts, so it only takes effect when `enable` runs before the first
computation; other backends do not read it.

`CompileWatch` tells a compile from a cache load, for the "compiling ..." messages.
"""

from __future__ import annotations

import os
import threading
import time
from pathlib import Path

import jax

ENVIRONMENT_VARIABLE = "DBAF_JAX_CACHE_DIR"
OFF = "off"
# JAX's event for a program loaded from the persistent cache (jax._src.compiler).
_CACHE_HIT_EVENT = "/jax/compilation_cache/cache_hits"
_GPU_AUTOTUNE_CACHE = "xla_gpu_per_fusion_autotune_cache_dir"
# XLA:CPU options every entry point runs with (see the module docstring).
CPU_XLA_FLAGS = ("--xla_cpu_experimental_ynn_fusion_type=",)
# Set (to anything) to keep XLA:CPU's default fusions: the test suite does, for itself and
# the commands it starts, so that a test's in-process and subprocess programs compile alike
# and its bit-exact comparisons across batch sizes hold as they were measured.
KEEP_CPU_FUSIONS_VARIABLE = "DBAF_JAX_KEEP_CPU_FUSIONS"

_hits = 0
_hits_lock = threading.Lock()
_listening = False


def default_directory() -> Path | None:
    """The cache folder the environment names (see the module docstring); None when off."""
    chosen = os.environ.get(ENVIRONMENT_VARIABLE)
    if chosen is not None:
        return None if chosen.strip().lower() in (OFF, "") else Path(chosen).expanduser()
    base = os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache"
    return Path(base) / "dbaf-jax" / "xla"


def _count_hit(event: str, **_) -> None:
    global _hits
    if event == _CACHE_HIT_EVENT:
        with _hits_lock:
            _hits += 1


def cache_hits() -> int:
    """Programs loaded from the persistent cache by this process so far."""
    with _hits_lock:
        return _hits


def add_cpu_xla_flags() -> None:
    """Adds `CPU_XLA_FLAGS` to ``XLA_FLAGS``, each unless ``XLA_FLAGS`` already names it
    (none when `KEEP_CPU_FUSIONS_VARIABLE` is set)."""
    if os.environ.get(KEEP_CPU_FUSIONS_VARIABLE):
        return
    flags = os.environ.get("XLA_FLAGS", "")
    for flag in CPU_XLA_FLAGS:
        if flag.split("=")[0] not in flags:
            flags = f"{flags} {flag}".strip()
    os.environ["XLA_FLAGS"] = flags


def enable(directory: str | Path | None = None) -> Path | None:
    """Points JAX's persistent compilation cache at ``directory`` (default:
    `default_directory`) unless it already has one, turns on the GPU kernels for
    random draws and off XLA:CPU's YNNPACK fusions (`CPU_XLA_FLAGS`, before the CPU
    backend starts only); returns the cache folder in use (None: no cache). Safe to
    call more than once."""
    global _listening
    add_cpu_xla_flags()
    jax.config.update("jax_threefry_gpu_kernel_lowering", True)
    if not _listening:
        jax.monitoring.register_event_listener(_count_hit)
        _listening = True
    current = jax.config.jax_compilation_cache_dir
    if current:
        return Path(current)
    folder = Path(directory).expanduser() if directory is not None else default_directory()
    if folder is None:
        return None
    folder.mkdir(parents=True, exist_ok=True)
    jax.config.update("jax_compilation_cache_dir", str(folder))
    jax.config.update("jax_persistent_cache_enable_xla_caches", _GPU_AUTOTUNE_CACHE)
    return folder


class CompileWatch:
    """Times a block that compiles and says whether it compiled or loaded from the cache.

    with CompileWatch() as watch:
        compiled = jitted.lower(*args).compile()
    print(watch.message("the stage-2 step"))
    """

    def __enter__(self) -> "CompileWatch":
        self._start = time.perf_counter()
        self._hits = cache_hits()
        self.seconds = 0.0
        self.from_cache = False
        return self

    def __exit__(self, *exc) -> None:
        self.seconds = time.perf_counter() - self._start
        self.from_cache = cache_hits() > self._hits

    def message(self, what: str) -> str:
        """``'<what>: loaded from the compilation cache in 1.2 s'`` or ``'<what>: compiled in 95.0 s'``."""
        how = "loaded from the compilation cache" if self.from_cache else "compiled"
        return f"{what}: {how} in {self.seconds:.1f} s"
