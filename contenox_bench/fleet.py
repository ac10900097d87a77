"""A team fleet on one machine: llama-server replicas behind vllm-router (docs/fleet.md).

``python -m contenox_bench.fleet up`` starts N replicas of the profile's model (the llama-server
the test command builds) on the loopback and vllm-router in front of them, prints the router's
URL, and keeps running until interrupted (Ctrl-C or SIGTERM stop every process it started).
The tests and the bench use ``start_fleet`` the same way.

Why vllm-router (PyPI ``vllm-router``, Rust): its ``consistent_hash`` policy hashes the
``X-Session-ID`` header, so each developer's requests keep landing on the replica that holds
their prefix; and it forwards every path, llama-server's own ``/completion``, ``/tokenize``,
``/detokenize``, ``/props`` and ``/slots`` included, routed by the same key. sglang-router 0.3
routes only the OpenAI and SGLang generate paths (checked with recording workers). Replica
health is checked every second, so a dead replica leaves the ring within ~1–2 s; until then
the router answers 502 and the client retries (``remote.retry_s``).
"""

from __future__ import annotations

import argparse
import contextlib
import os
import shutil
import signal
import subprocess
import sys
import sysconfig
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

import httpx

from contenox_bench import llama_server

#: Routing policies of vllm-router this project uses: affinity by session key, and the
#: round-robin a plain load balancer gives (the bench's comparison).
POLICIES = ("consistent_hash", "round_robin")


def router_binary() -> Path | None:
    """vllm-router's launcher: next to this interpreter (a venv's bin) or on PATH."""
    beside = Path(sysconfig.get_path("scripts")) / "vllm-router"
    if beside.is_file():
        return beside
    found = shutil.which("vllm-router")
    return Path(found) if found else None


def unavailable_reason() -> str | None:
    """Why no fleet can run here (None: llama-server and vllm-router are both there)."""
    reason = llama_server.unavailable_reason()
    if reason is not None:
        return reason
    if router_binary() is None:
        return "vllm-router is not installed (pip install -e '.[dev]' or pip install vllm-router)"
    return None


@dataclass
class Fleet:
    """Running replicas and the router in front of them."""

    url: str
    router: subprocess.Popen[bytes]
    replicas: list[llama_server.RunningServer]
    policy: str
    log_dir: Path

    def kill_replica(self, index: int) -> None:
        """SIGKILL one replica (what a crash or a lost machine looks like to the router)."""
        self.replicas[index].process.kill()
        self.replicas[index].process.wait()

    def replicas_using(self, slot: int) -> list[int]:
        """The live replicas on which ``slot`` has held a prompt (tests: where a developer,
        whose key picks that slot, has been served)."""
        using = []
        for i, replica in enumerate(self.replicas):
            if replica.process.poll() is not None:
                continue
            slots = httpx.get(f"{replica.url}/slots", timeout=10).json()
            if any(s.get("id") == slot and s.get("n_prompt_tokens") for s in slots):
                using.append(i)
        return using

    def stop(self) -> None:
        if self.router.poll() is None:
            self.router.terminate()
            try:
                self.router.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.router.kill()
                self.router.wait()
        for replica in self.replicas:
            replica.stop()


def start_fleet(model: Path, *, log_dir: Path, replicas: int = 2,
                policy: str = "consistent_hash", port: int | None = None, n_ctx: int = 4096,
                slots: int = 2, threads: int = 1, ubatch: int | None = 32,
                ready_timeout_s: float = 120.0, models: Sequence[Path] = ()) -> Fleet:
    """Start ``replicas`` llama-servers (``slots`` slots of ``n_ctx`` each) and vllm-router
    with ``policy`` on 127.0.0.1; returns once the router answers through to its replicas.
    ``models``: a model per replica (tests: a replica serving another model), else ``model``."""
    if policy not in POLICIES:
        raise ValueError(f"policy must be one of {', '.join(POLICIES)}")
    binary = router_binary()
    if binary is None:
        raise RuntimeError(unavailable_reason() or "vllm-router is not installed")
    log_dir.mkdir(parents=True, exist_ok=True)
    running: list[llama_server.RunningServer] = []
    try:
        for i in range(replicas):
            running.append(llama_server.start(
                models[i] if i < len(models) else model, log_path=log_dir / f"replica-{i}.log",
                n_ctx=n_ctx, slots=slots, threads=threads, ubatch=ubatch,
                ready_timeout_s=ready_timeout_s))
        port = port or llama_server.free_port()
        cmd = [str(binary), "--host", "127.0.0.1", "--port", str(port),
               "--worker-urls", *(r.url for r in running), "--policy", policy,
               # A dead replica leaves the ring after one failed check a second.
               "--health-check-interval-secs", "1", "--health-failure-threshold", "1",
               "--prometheus-port", str(llama_server.free_port()), "--log-level", "warning"]
        log_file = (log_dir / "router.log").open("wb")
        router = subprocess.Popen(cmd, stdout=log_file, stderr=subprocess.STDOUT)
    except BaseException:
        for replica in running:
            replica.stop()
        raise
    fleet = Fleet(f"http://127.0.0.1:{port}", router, running, policy, log_dir)
    try:  # ready once a request gets through the router to a replica
        llama_server.wait_ready(router, f"{fleet.url}/props", "vllm-router",
                                log_dir / "router.log", ready_timeout_s)
    except RuntimeError:
        fleet.stop()
        raise
    return fleet


@contextlib.contextmanager
def running_fleet(model: Path, log_dir: Path, **kwargs: object) -> Iterator[Fleet]:
    fleet = start_fleet(model, log_dir=log_dir, **kwargs)  # type: ignore[arg-type]
    try:
        yield fleet
    finally:
        fleet.stop()


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m contenox_bench.fleet",
        description="llama-server replicas behind vllm-router on this machine (docs/fleet.md)")
    sub = parser.add_subparsers(dest="command", required=True)
    up = sub.add_parser("up", help="start the fleet; runs until interrupted")
    up.add_argument("--model", help="GGUF file (default: the default profile's model)")
    up.add_argument("--replicas", type=int, default=2)
    up.add_argument("--port", type=int, default=8090, help="the router's port")
    up.add_argument("--policy", choices=POLICIES, default="consistent_hash")
    up.add_argument("--ctx", type=int, default=8192, help="context of each slot, tokens")
    up.add_argument("--slots", type=int, default=4, help="slots per replica (developers)")
    up.add_argument("--threads", type=int, default=max(1, (os.cpu_count() or 2) // 2))
    up.add_argument("--log-dir", default="fleet-logs")
    args = parser.parse_args(argv)
    reason = unavailable_reason()
    if reason is not None:
        print(f"fleet: {reason}", file=sys.stderr)
        return 1
    from engine import load_profile
    from engine.model_files import resolve_model_path

    model = Path(args.model) if args.model else resolve_model_path(load_profile(None))
    fleet = start_fleet(model, log_dir=Path(args.log_dir), replicas=args.replicas,
                        policy=args.policy, port=args.port, n_ctx=args.ctx, slots=args.slots,
                        threads=args.threads)
    print(f"fleet: {args.replicas} replica(s) of {model.name} behind vllm-router "
          f"({args.policy}) at {fleet.url}; logs in {args.log_dir}; Ctrl-C stops it",
          flush=True)
    stop = False

    def on_signal(*_: object) -> None:
        nonlocal stop
        stop = True

    signal.signal(signal.SIGTERM, on_signal)
    try:
        while not stop and fleet.router.poll() is None:
            time.sleep(0.5)
    except KeyboardInterrupt:
        pass
    finally:
        fleet.stop()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
