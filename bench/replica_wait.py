"""What waiting for a replica costs an order: p50/p99 of ``POST /v1/orders``
at a paced (open-loop) rate with ``TICKETRY_REDIS_MIN_REPLICAS=0`` and ``=1``.

    uv run --frozen python -m bench.replica_wait [--rate 50] [--seconds 15] [--legs 3]

In ``just bench`` (``--no-replica-wait`` skips it, ~3 min).

One stack on a real Redis primary with one replica (``--replicaof``) on this
machine; the api is restarted between legs with the setting flipped, legs
alternated (0, 1, 0, 1, …) so a slow minute of a shared machine falls on both.
Prints each leg and the medians' ratio (with / without).
"""

from __future__ import annotations

import argparse
import asyncio
import shutil
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

import redis
from ticketry_devstack.procs import Proc, Stack, free_port, redis_proc, start_stack, wait_port

from bench import scenarios


def start_pair(root: Path) -> tuple[Proc, Proc, str]:
    """A Redis primary and its replica under ``root``, once the replica is online."""
    pport, rport = free_port(), free_port()
    primary = redis_proc(root / "primary", pport).start()
    wait_port(pport, proc=primary.popen)
    base = redis_proc(root / "replica", rport)
    replica = Proc("redis-replica", [*base.argv, "--replicaof", "127.0.0.1", str(pport)], base.env, base.log_path)
    replica.start()
    wait_port(rport, proc=replica.popen)
    client = redis.Redis(port=pport)
    deadline = time.monotonic() + 60
    while not (isinstance(r := client.info("replication").get("slave0"), dict) and r.get("state") == "online"):
        if time.monotonic() > deadline:
            raise TimeoutError("the replica never came online")
        time.sleep(0.05)
    client.close()
    return primary, replica, f"redis://127.0.0.1:{pport}/0"


def restart_api(stack: Stack, min_replicas: int) -> None:
    stack.procs["api"].stop()
    stack.start_api({"TICKETRY_REDIS_MIN_REPLICAS": str(min_replicas)})


async def measure(rate: float, seconds: float, legs: int) -> dict[str, Any]:
    root = Path(tempfile.mkdtemp(prefix="ticketry-replica-wait-"))
    primary, replica, url = start_pair(root)
    stack: Stack | None = None
    out: dict[int, list[dict[str, Any]]] = {0: [], 1: []}
    try:
        stack = start_stack(root / "stack", 1, redis_url=url)
        await scenarios.post_latency(stack, rate, 10)  # warm-up: designs, caches, connections
        for _ in range(legs):
            for n in (0, 1):
                restart_api(stack, n)
                leg = await scenarios.post_latency(stack, rate, seconds)
                out[n].append(leg)
                print(f"min_replicas={n}: {leg}", flush=True)
    finally:
        if stack is not None:
            stack.stop()
        replica.stop()
        primary.stop()
        shutil.rmtree(root, ignore_errors=True)

    def med(n: int, key: str) -> float | None:
        vals = [leg[key] for leg in out[n] if leg[key] is not None]
        return statistics.median(vals) if vals else None

    summary = {f"{k}_{n}": med(n, k) for n in (0, 1) for k in ("p50_ms", "p99_ms")}
    summary["refused_1"] = sum(leg["refused"] for leg in out[1])
    return {"rate": rate, "seconds": seconds, "legs": out, "summary": summary}


Row = tuple[str, str, str, str]


def run(rate: float = 50.0, seconds: float = 15.0, legs: int = 3) -> dict[str, Any]:
    """:func:`measure` from synchronous code (``bench/__main__``)."""
    return asyncio.run(measure(rate, seconds, legs))


def table(got: dict[str, Any]) -> list[Row]:
    """Rows for the bench table: p50 and p99 without and with one replica, their ratios."""
    s, rate = got["summary"], got["rate"]
    rows: list[Row] = []
    for k, label in (("p50_ms", "p50"), ("p99_ms", "p99")):
        without, with_ = s[f"{k}_0"], s[f"{k}_1"]
        ratio = f"{with_ / without:.2f}×" if without and with_ else "n/a"
        rows.append((
            f"POST /v1/orders {label} at {rate:g}/s (ms): without / with WAIT for 1 replica",
            f"{without:.1f} / {with_:.1f}" if without and with_ else "n/a", "", ratio,
        ))  # fmt: skip
    return rows


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rate", type=float, default=50.0)
    ap.add_argument("--seconds", type=float, default=15.0)
    ap.add_argument("--legs", type=int, default=3)
    args = ap.parse_args()
    got = run(args.rate, args.seconds, args.legs)
    for row in table(got):
        print(" | ".join(row))
    print(f"refused with 1 replica: {got['summary']['refused_1']}")


if __name__ == "__main__":
    main()
