"""A llama-server for tests and the bench: built once from the llama.cpp that llama-cpp-python
vendors (same commit as the in-process engine), cached, and started on the loopback.

``python -m contenox_bench.llama_server build`` (what ``.ci/run`` calls) builds the
``llama-server`` target from the installed llama-cpp-python version's source distribution
(``vendor/llama.cpp``) into the cache unless it is there already. It is built as
llama-cpp-python builds its library (llama.cpp's defaults: ``-march=native``, the repack and
llamafile kernels): the server then runs the in-process engine's kernels, so the two give the
same greedy tokens on the same prompt and micro-batch split. A native binary only runs on the
CPU kind it was built for, so the cache is keyed by the llama-cpp-python version and a digest
of the CPU's feature flags.
"""

from __future__ import annotations

import argparse
import contextlib
import hashlib
import importlib.metadata
import os
import shutil
import socket
import subprocess
import sys
import tarfile
import tempfile
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

import httpx
import platformdirs

#: CMake options of the cached build: only what to build; the kernels are llama.cpp's defaults.
CMAKE_OPTIONS = (
    "-DCMAKE_BUILD_TYPE=Release", "-DBUILD_SHARED_LIBS=OFF",
    "-DLLAMA_BUILD_TESTS=OFF", "-DLLAMA_BUILD_EXAMPLES=OFF", "-DLLAMA_BUILD_TOOLS=ON",
    "-DLLAMA_BUILD_SERVER=ON", "-DLLAMA_BUILD_APP=OFF", "-DLLAMA_BUILD_UI=OFF",
    "-DLLAMA_USE_PREBUILT_UI=OFF", "-DLLAMA_OPENSSL=OFF", "-DGGML_CCACHE=OFF",
)
#: Set to use another llama-server binary (tests and the bench then skip the build).
BINARY_ENV = "CONTENOX_LLAMA_SERVER"


def llama_cpp_version() -> str:
    return importlib.metadata.version("llama_cpp_python")


def _cpuinfo() -> str:
    """``/proc/cpuinfo`` ("" where there is none)."""
    try:
        return Path("/proc/cpuinfo").read_text(encoding="utf-8", errors="replace")
    except OSError:
        return ""


def cpu_key() -> str:
    """A digest of the CPU's model name and feature flags (what -march=native compiles for)."""
    picked = [line for line in _cpuinfo().splitlines()
              if line.startswith(("flags", "model name", "Features", "CPU part"))]
    facts = "\n".join(sorted(set(picked)))
    return hashlib.sha256(facts.encode()).hexdigest()[:12]


def cpu_has_amx() -> bool:
    """Whether the CPU has Intel AMX (``amx_int8``): a native build then has llama.cpp's AMX
    kernels, which crashed llama-server (SIGSEGV in ``ggml_backend_amx_mul_mat``) on the first
    batch of Gemma 3 270M with repacked weights; ``start`` turns repacking off there."""
    return any(line.startswith("flags") and " amx_int8" in line
               for line in _cpuinfo().splitlines())


def repacks() -> bool:
    """Whether ``start`` leaves llama-server's weight repacking on (its default): everywhere
    but on AMX CPUs (``cpu_has_amx``). The in-process engine computes as the server does with
    ``context.repack_weights`` set to this."""
    return not cpu_has_amx()


def cache_dir() -> Path:
    root = Path(platformdirs.user_cache_dir("contenox-lsp"))
    return root / "llama-server" / f"{llama_cpp_version()}-native-{cpu_key()}"


def binary_path() -> Path:
    override = os.environ.get(BINARY_ENV)
    return Path(override) if override else cache_dir() / "llama-server"


def unavailable_reason() -> str | None:
    """Why no llama-server can run here (None: the binary is there and executable)."""
    path = binary_path()
    if not path.is_file():
        return (f"no llama-server binary at {path}: run 'python -m contenox_bench.llama_server "
                f"build' (about 12 minutes on 2 cores) or set {BINARY_ENV}")
    if not os.access(path, os.X_OK):
        return f"{path} is not executable"
    return None


def _source_dist(work: Path) -> Path:
    """The llama.cpp tree of the installed llama-cpp-python version (pip's cache serves the
    download after the first install)."""
    version = llama_cpp_version()
    subprocess.run(
        [sys.executable, "-m", "pip", "download", "--no-deps", "--no-binary", ":all:",
         "--dest", str(work), f"llama-cpp-python=={version}"],
        check=True, stdout=sys.stderr,
    )
    archive = next(work.glob("llama_cpp_python-*.tar.gz"))
    with tarfile.open(archive) as tar:
        tar.extractall(work, filter="data")
    return next(work.glob("llama_cpp_python-*/vendor/llama.cpp"))


def build(jobs: int | None = None) -> Path:
    """Build and cache ``llama-server`` unless the cache has it; returns the binary's path."""
    target = cache_dir() / "llama-server"
    if target.is_file():
        print(f"llama-server: cached at {target}", file=sys.stderr)
        return target
    started = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="llama-server-build-") as tmp:
        src = _source_dist(Path(tmp))
        build_dir = src / "build"
        subprocess.run(["cmake", "-S", str(src), "-B", str(build_dir), *CMAKE_OPTIONS],
                       check=True, stdout=sys.stderr)
        subprocess.run(
            ["cmake", "--build", str(build_dir), "--target", "llama-server",
             "-j", str(jobs or os.cpu_count() or 2)],
            check=True, stdout=sys.stderr,
        )
        target.parent.mkdir(parents=True, exist_ok=True)
        partial = target.with_suffix(".partial")
        shutil.copy2(build_dir / "bin" / "llama-server", partial)
        partial.replace(target)  # atomic: a half-copied binary is never "cached"
    print(f"llama-server: built in {time.monotonic() - started:.0f} s, cached at {target}",
          file=sys.stderr)
    return target


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@dataclass
class RunningServer:
    url: str
    port: int
    process: subprocess.Popen[bytes]
    log_path: Path

    def stop(self) -> None:
        if self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()


def start(model: Path, *, log_path: Path, port: int | None = None, n_ctx: int = 8192,
          slots: int = 1, threads: int | None = None, ubatch: int | None = 32,
          flash_attn: str = "off", extra: Sequence[str] = (),
          ready_timeout_s: float = 120.0) -> RunningServer:
    """Start llama-server on 127.0.0.1 with ``model`` and wait until ``/health`` says ok.

    ``--swa-full`` (every position of a sliding-window model reusable, as the in-process
    engine runs Gemma 3), flash attention ``flash_attn`` (off: the remote backend's
    warm == cold with ``remote.reuse_chunk`` was established with it), micro-batches of
    ``ubatch`` (a profile's ``remote.reuse_chunk`` equal to it gives warm == cold), batches of
    256 (a cancelled prefill ends within one) — or, with ``ubatch=None``, llama-server's own
    batch defaults (``-b 2048 -ub 512``) — ``-c`` = ``n_ctx`` × ``slots`` (llama-server
    splits it), and ``--no-repack`` on AMX CPUs (``repacks``)."""
    port = port or free_port()
    cmd = [
        str(binary_path()), "-m", str(model), "--host", "127.0.0.1", "--port", str(port),
        "-c", str(n_ctx * slots), "-np", str(slots), "--swa-full", "--no-webui",
        "--flash-attn", flash_attn,
        *(() if ubatch is None else
          ("-ub", str(ubatch), "-b", str(max(ubatch, 256) // ubatch * ubatch))),
        "-t", str(threads or os.cpu_count() or 2),
        *(() if repacks() else ("--no-repack",)), *extra,
    ]
    log_file = log_path.open("wb")
    process = subprocess.Popen(cmd, stdout=log_file, stderr=subprocess.STDOUT)
    server = RunningServer(f"http://127.0.0.1:{port}", port, process, log_path)
    try:
        wait_ready(process, f"{server.url}/health", "llama-server", log_path, ready_timeout_s)
    except RuntimeError:
        server.stop()
        raise
    return server


def wait_ready(process: subprocess.Popen[bytes], url: str, name: str, log: Path,
               timeout_s: float) -> None:
    """Until ``url`` answers 200; RuntimeError (naming ``log``) when ``process`` exits first
    or ``timeout_s`` passes."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise RuntimeError(f"{name} exited ({process.returncode}); see {log}")
        with contextlib.suppress(httpx.HTTPError):
            if httpx.get(url, timeout=2).status_code == 200:
                return
        time.sleep(0.2)
    raise RuntimeError(f"{name} did not become ready in {timeout_s} s; see {log}")


@contextlib.contextmanager
def running(model: Path, log_path: Path, **kwargs: object) -> Iterator[RunningServer]:
    server = start(model, log_path=log_path, **kwargs)  # type: ignore[arg-type]
    try:
        yield server
    finally:
        server.stop()


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m contenox_bench.llama_server")
    sub = parser.add_subparsers(dest="command", required=True)
    b = sub.add_parser("build", help="build and cache llama-server (no-op when cached)")
    b.add_argument("--jobs", type=int, default=None)
    b.add_argument("--best-effort", action="store_true",
                   help="exit 0 when the build fails (the tests that need it then skip)")
    sub.add_parser("path", help="print where the binary is (or would be)")
    args = parser.parse_args(argv)
    if args.command == "path":
        print(binary_path())
        return 0
    try:
        build(args.jobs)
    except (RuntimeError, subprocess.CalledProcessError, StopIteration, OSError) as exc:
        print(f"llama-server: build failed: {exc}", file=sys.stderr)
        return 0 if args.best_effort else 1
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
