"""``python -m ticketry_devstack up|down|demo`` — the local stack in the foreground."""

from __future__ import annotations

import argparse
import asyncio
import os
import signal
import sys
import time
from pathlib import Path

from ticketry_devstack.demo import demo
from ticketry_devstack.procs import REPO, Stack

PIDFILE = REPO / ".data" / "stack.pid"


def up(args: argparse.Namespace) -> int:
    data = REPO / ".data"
    env = {"TICKETRY_DEV_MODE": os.environ.get("TICKETRY_DEV_MODE", "1")}
    stack = Stack(
        data,
        env=env,
        api_port=int(os.environ.get("TICKETRY_API_PORT", "8000")),
        notifier_port=int(os.environ.get("TICKETRY_NOTIFIER_PORT", "8001")),
        redis_port=int(os.environ.get("TICKETRY_DEV_REDIS_PORT", "6379")),
        mongo_port=int(os.environ.get("TICKETRY_DEV_MONGO_PORT", "27017")),
    )
    stopping = False

    def on_signal(signum: int, _: object) -> None:
        nonlocal stopping
        stopping = True

    signal.signal(signal.SIGINT, on_signal)
    signal.signal(signal.SIGTERM, on_signal)
    try:
        stack.start_infra(os.environ.get("TICKETRY_REDIS_URL"), os.environ.get("TICKETRY_MONGO_URL"))
        stack.start_api()
        stack.start_notifier()
        stack.start_service("scaler")
        PIDFILE.write_text(str(os.getpid()))
        print(
            f"\nTicketry is up (dev mode; logs in {data / 'logs'})\n"
            f"  API        {stack.api_url}   docs: {stack.api_url}/docs\n"
            f"  progress   {stack.notifier_url}/v1/orders/<order id>/progress?token=<JWT>\n"
            f"  Redis      {stack.env['TICKETRY_REDIS_URL']}\n"
            f"  MongoDB    {stack.env['TICKETRY_MONGO_URL']}\n"
            "  Ctrl-C stops everything.\n",
            flush=True,
        )
        if args.demo:
            asyncio.run(demo(stack.api_url, args.demo))
        while not stopping:
            for name, proc in stack.procs.items():
                if not proc.alive():
                    print(f"{name} exited ({proc.popen.returncode if proc.popen else '?'}); stopping", file=sys.stderr)
                    stopping = True
            time.sleep(0.5)
    finally:
        print("stopping…", flush=True)
        stack.stop()
        PIDFILE.unlink(missing_ok=True)
    return 0


def down(_args: argparse.Namespace) -> int:
    if not PIDFILE.exists():
        print("no stack running")
        return 0
    pid = int(PIDFILE.read_text())
    try:
        os.kill(pid, signal.SIGTERM)
    except ProcessLookupError:
        PIDFILE.unlink(missing_ok=True)
        return 0
    for _ in range(120):
        if not Path(f"/proc/{pid}").exists():
            break
        time.sleep(0.25)
    return 0


def main() -> int:
    parser = argparse.ArgumentParser(prog="ticketry_devstack")
    sub = parser.add_subparsers(dest="cmd", required=True)
    p_up = sub.add_parser("up", help="run the whole stack in the foreground")
    p_up.add_argument("--demo", type=int, default=0, metavar="N", help="place a demo order of N tickets")
    p_up.set_defaults(fn=up)
    sub.add_parser("down", help="stop a stack started in the background").set_defaults(fn=down)
    p_demo = sub.add_parser("demo", help="place a demo order against a running stack")
    p_demo.add_argument("--api", default=f"http://127.0.0.1:{os.environ.get('TICKETRY_API_PORT', '8000')}")
    p_demo.add_argument("-n", type=int, default=20)
    p_demo.set_defaults(fn=lambda a: asyncio.run(demo(a.api, a.n)) or 0)
    args = parser.parse_args()
    rc: int = args.fn(args)
    return rc


if __name__ == "__main__":
    sys.exit(main())
