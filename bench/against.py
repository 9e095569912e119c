"""``just bench --against <rev>``: the end-to-end scenario for this tree and for
revision ``<rev>``, alternately in one run (this tree, ``<rev>``, this tree,
``<rev>`` … ``rounds`` each), each side's rounds, medians and their ratio.

The scenario is ``bench/scenarios.big_order``: one ``quantity``-ticket order
(10,000 by default, no probes beside it), tickets/s from its 202 to its
``order.completed``, after a 20-ticket order that warms every process.

``<rev>`` is checked out with ``git worktree add --detach`` under a temporary
directory, gets its own environment (``uv sync --frozen``, offline from uv's
cache first) and the repository's ``.bin`` (FerretDB), and is removed at the
end. Each round is a fresh process of that side's own Python (its ``.venv``):
it starts that side's stack (its devstack, its services, from its tree), runs
the scenario and stops it, so neither side inherits the other's caches, data
or leftover load. Both sides measure with this tree's ``bench/scenarios.py``
(the same client code; only the stack differs), or with the side's own where
this one does not import there. An old revision's bench needs no new option.

This module imports only the standard library at its top: the side process
runs it from this tree's path under the other revision's environment.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
HERE = "current"
THERE = "rev"
MIN_ROUNDS = 2
TARGET_RATIO = 2.0
WARM_TICKETS = 20
MARK = "AGAINST-RESULT "
# The side process: this file run by path (runpy), its ``side_main`` called with
# the round's parameters; ``-c`` puts the side's tree (its cwd) first on sys.path.
_BOOT = "import runpy, sys; runpy.run_path(sys.argv[1])['side_main'](sys.argv[2])"
_KEPT = ("quantity", "tickets_per_s", "end_to_end_s", "post_202_s", "first_ticket_ms")

Row = tuple[str, str, str, str]


# -- pure: the order of the rounds, the summary, the table rows -----------------


def schedule(rounds: int) -> list[tuple[int, str]]:
    """(round, side) in the order they run: this tree, then ``<rev>``, each round."""
    if rounds < MIN_ROUNDS:
        raise ValueError(f"at least {MIN_ROUNDS} rounds per side, got {rounds}")
    return [(i, side) for i in range(1, rounds + 1) for side in (HERE, THERE)]


def summarise(tps: Mapping[str, Sequence[float]]) -> dict[str, Any]:
    """Each side's median tickets/s and the ratio this tree / ``<rev>`` (None
    where a side has no round measured)."""
    medians = {side: (statistics.median(tps[side]) if tps.get(side) else None) for side in (HERE, THERE)}
    here, there = medians[HERE], medians[THERE]
    ratio = here / there if here is not None and there else None
    return {"tickets_per_s": {s: list(tps.get(s, [])) for s in (HERE, THERE)}, "median": medians, "ratio": ratio}


def _fmt(v: float | None, unit: str = "") -> str:
    if v is None:
        return "n/a"
    return f"{v:,.2f}{unit}" if unit == "×" else f"{v:,.1f}{unit}" if abs(v) < 100 else f"{v:,.0f}{unit}"


def rows(got: Mapping[str, Any]) -> list[Row]:
    """The bench table's rows for one A/B run (``run``'s result)."""
    s, rev, q = got["summary"], got["rev"], got["quantity"]
    each = " / ".join(", ".join(_fmt(v) for v in s["tickets_per_s"][side]) or "n/a" for side in (HERE, THERE))
    return [
        (f"end to end A/B, {q:,}-ticket order: this tree vs {rev}, median (tickets/s)",
         f"{_fmt(s['median'][HERE])} vs {_fmt(s['median'][THERE])}", f"≥ {TARGET_RATIO:g}×", _fmt(s["ratio"], "×")),
        (f"  each round, this tree / {rev}, alternated (tickets/s)", each, "", ""),
    ]  # fmt: skip


def met(got: Mapping[str, Any]) -> bool:
    ratio = got["summary"]["ratio"]
    return ratio is not None and ratio >= TARGET_RATIO


# -- the other revision's tree -----------------------------------------------


def _git(*args: str) -> str:
    done = subprocess.run(["git", "-C", str(REPO), *args], capture_output=True, text=True, check=False)
    if done.returncode != 0:
        raise RuntimeError(f"git {' '.join(args)}: {done.stderr.strip()}")
    return done.stdout.strip()


def _uv_env() -> dict[str, str]:
    """This process's environment without what points at this tree's venv."""
    drop = ("VIRTUAL_ENV", "UV_PROJECT_ENVIRONMENT", "PYTHONPATH", "PYTHONHOME")
    return {k: v for k, v in os.environ.items() if k not in drop}


@contextlib.contextmanager
def checkout(rev: str) -> Iterator[Path]:
    """``rev``'s tree with its own synced ``.venv``; removed on exit."""
    tmp = Path(tempfile.mkdtemp(prefix="ticketry-against-"))
    tree = tmp / "tree"
    _git("worktree", "add", "--detach", str(tree), rev)
    try:
        if (REPO / ".bin").exists():
            (tree / ".bin").symlink_to(REPO / ".bin")  # FerretDB: infra/bootstrap.sh builds it once
        env = _uv_env()
        synced = subprocess.run(["uv", "sync", "--frozen", "--offline"], cwd=tree, env=env, capture_output=True)
        if synced.returncode != 0:  # a wheel missing from uv's cache: fetch it
            subprocess.run(["uv", "sync", "--frozen"], cwd=tree, env=env, check=True, capture_output=True)
        yield tree
    finally:
        with contextlib.suppress(RuntimeError):
            _git("worktree", "remove", "--force", str(tree))
        shutil.rmtree(tmp, ignore_errors=True)
        with contextlib.suppress(RuntimeError):
            _git("worktree", "prune")


# -- one round: a process of the side's Python ---------------------------------


def run_side(tree: Path, python: Path, quantity: int, timeout_s: float, folders: Path) -> dict[str, Any]:
    """One round on ``tree``'s stack, run by ``python``, its folder made in
    ``folders`` (and left there); the scenario's figures."""
    params = json.dumps({"quantity": quantity, "scenarios": str(REPO / "bench" / "scenarios.py"),
                         "renderers": os.cpu_count() or 1, "folders": str(folders)})  # fmt: skip
    proc = subprocess.Popen(
        [str(python), "-c", _BOOT, str(Path(__file__).resolve()), params],
        cwd=tree, env=_uv_env(), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    try:
        out, err = proc.communicate(timeout=timeout_s)
    except BaseException:
        # A hang or ^C: SIGINT lets the side stop its stack (its ``finally``);
        # SIGKILL would leave the stack's processes running.
        proc.send_signal(signal.SIGINT)
        try:
            proc.communicate(timeout=60)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.communicate()
        raise
    for line in out.splitlines():
        if line.startswith(MARK):
            got: dict[str, Any] = json.loads(line.removeprefix(MARK))
            return got
    tail = (err or out).strip().splitlines()[-5:]
    raise RuntimeError(f"side in {tree} exited {proc.returncode} without a result: {' | '.join(tail)}"[:600])


def side_main(params_json: str) -> None:
    """In the side's process: its stack, the warm-up order, the measured order;
    prints ``MARK`` + the figures as JSON."""
    import asyncio
    import importlib
    import importlib.util

    from ticketry_devstack.procs import start_stack, tool

    t0 = time.monotonic()
    p = json.loads(params_json)
    scen: Any
    try:
        spec = importlib.util.spec_from_file_location("bench_against_scenarios", p["scenarios"])
        assert spec is not None and spec.loader is not None
        scen = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(scen)
    except (ImportError, AttributeError):  # this tree's client needs what the side lacks: the side's own
        scen = importlib.import_module("bench.scenarios")
    root = Path(tempfile.mkdtemp(prefix="stack-", dir=p["folders"]))
    stack = start_stack(root, renderers=int(p["renderers"]))
    started = time.monotonic()
    try:

        async def go() -> dict[str, Any]:
            await scen.big_order(stack, WARM_TICKETS, 0)
            got: dict[str, Any] = await scen.big_order(stack, int(p["quantity"]), 0)
            return got

        got = asyncio.run(go())
    finally:
        signal.signal(signal.SIGINT, signal.SIG_IGN)  # ^C reaches us and our parent's SIGINT follows: stop once
        stack.stop()
    kept = {k: got.get(k) for k in _KEPT}
    # Which code ran: the renderer's console script names its venv, hence its tree.
    kept |= {"renderer": tool("ticketry-renderer"), "scenarios": scen.__file__,
             "stack_start_s": started - t0, "side_s": time.monotonic() - t0}  # fmt: skip
    print(MARK + json.dumps(kept), flush=True)


# -- the whole A/B -------------------------------------------------------------


def run(rev: str, rounds: int = 3, quantity: int = 10_000) -> dict[str, Any]:
    """Both sides alternately, ``rounds`` each; per round its figures and the
    load average when it started; the summary. A failed round is noted and
    left out of the medians."""
    order = schedule(rounds)
    sha = _git("rev-parse", "--verify", f"{rev}^{{commit}}")
    head = _git("rev-parse", "HEAD")
    dirty = bool(_git("status", "--porcelain", "--untracked-files=no"))
    timeout_s = 600 + quantity / 20  # a bound on a hang: 20 tickets/s is far below either side
    measured: list[dict[str, Any]] = []
    print(f"A/B: this tree ({head[:7]}{', uncommitted changes' if dirty else ''}) vs {rev} ({sha[:7]}) …")
    # Every round's stack folder (its 10,000 PDFs) stays until the last round is
    # done: on a filesystem without a journal, ext4 skips the inodes freed in the
    # last 15-20 s when it makes a file, so the round after a deletion would pay
    # for it, up to ~0.6 ms of kernel CPU per PDF (docs/performance-notes.md).
    with checkout(sha) as tree, tempfile.TemporaryDirectory(prefix="ticketry-against-stacks-") as folders:
        sides = {HERE: (REPO, Path(sys.executable)), THERE: (tree, tree / ".venv" / "bin" / "python")}
        for i, side in order:
            where, python = sides[side]
            label = "this tree" if side == HERE else rev
            load = os.getloadavg()
            print(f"A/B round {i}/{rounds}, {label}: {quantity:,}-ticket order …", flush=True)
            entry: dict[str, Any] = {"round": i, "side": side, "loadavg": [round(x, 2) for x in load]}
            if side == HERE:  # the working tree as it is now: commits and edits may land between rounds
                entry["head_sha"] = _git("rev-parse", "HEAD")
                entry["head_dirty"] = bool(_git("status", "--porcelain", "--untracked-files=no"))
            try:
                entry.update(run_side(where, python, quantity, timeout_s, Path(folders)))
                print(f"  {entry['tickets_per_s']:,.1f} tickets/s ({entry['end_to_end_s']:.1f} s),"
                      f" load average {load[0]:.2f}", flush=True)  # fmt: skip
            except (RuntimeError, subprocess.SubprocessError, OSError) as exc:
                entry["error"] = f"{type(exc).__name__}: {exc}"[:600]
                print(f"  failed: {entry['error']}", flush=True)
            measured.append(entry)
    tps = {s: [m["tickets_per_s"] for m in measured if m["side"] == s and "error" not in m] for s in (HERE, THERE)}
    summary = summarise(tps)
    print(f"A/B median: this tree {_fmt(summary['median'][HERE])} vs {rev} {_fmt(summary['median'][THERE])}"
          f" tickets/s, ratio {_fmt(summary['ratio'], '×')}", flush=True)  # fmt: skip
    return {"rev": rev, "rev_sha": sha, "head_sha": head, "head_dirty": dirty, "quantity": quantity,
            "rounds": measured, "summary": summary,
            "started_loadavg": measured[0]["loadavg"] if measured else None}  # fmt: skip
