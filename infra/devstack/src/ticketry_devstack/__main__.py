"""``python -m ticketry_devstack up|down|demo`` — the local stack in the foreground."""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import signal
import sys
import time
from collections.abc import Mapping
from pathlib import Path

from ticketry_devstack.demo import demo
from ticketry_devstack.env import PREFIX, redacted, up_env
from ticketry_devstack.haproxy import LbSettings, haproxy_binary, start_lb
from ticketry_devstack.procs import REPO, Stack, mailpit_proc, wait_port
from ticketry_devstack.walletca import dev_wallet_env

DATA = REPO / ".data"


def build_stack(environ: Mapping[str, str], data: Path = REPO / ".data") -> Stack:
    """The stack ``just up`` runs: every ``TICKETRY_*`` setting of ``environ``
    wins over the devstack's defaults (see :mod:`ticketry_devstack.env`)."""
    return Stack(
        data,
        env=up_env(environ),
        api_port=int(environ.get("TICKETRY_API_PORT", "8000")),
        notifier_port=int(environ.get("TICKETRY_NOTIFIER_PORT", "8001")),
        redis_port=int(environ.get("TICKETRY_DEV_REDIS_PORT", "6379")),
        mongo_port=int(environ.get("TICKETRY_DEV_MONGO_PORT", "27017")),
    )


def start_infra(stack: Stack, environ: Mapping[str, str]) -> None:
    """Redis and FerretDB unless ``environ`` points at running ones."""
    stack.start_infra(environ.get("TICKETRY_REDIS_URL"), environ.get("TICKETRY_MONGO_URL"))


def start_balancer(stack: Stack, environ: Mapping[str, str]) -> str | None:
    """HAProxy in front of the api on ``TICKETRY_DEV_LB_PORT`` (8080), where
    clients that may flood should come in; its URL, or None without HAProxy
    (the api's own address works either way)."""
    if haproxy_binary() is None:
        print("no haproxy installed (infra/bootstrap.sh installs it): no load balancer", flush=True)
        return None
    cfg = LbSettings(port=int(environ.get("TICKETRY_DEV_LB_PORT", "8080")), apis=[f"127.0.0.1:{stack.api_port}"])
    start_lb(stack, cfg)
    return f"http://127.0.0.1:{cfg.port}"


def start_mailbox(stack: Stack, environ: Mapping[str, str]) -> str | None:
    """mailpit, where the api mails the tickets (``TICKETRY_SMTP_URL``) unless
    ``environ`` names an SMTP server; the URL of its web inbox, or None."""
    if environ.get("TICKETRY_SMTP_URL"):
        return None
    smtp_port = int(environ.get("TICKETRY_DEV_SMTP_PORT", "1025"))
    ui_port = int(environ.get("TICKETRY_DEV_MAIL_UI_PORT", "8025"))
    proc = mailpit_proc(stack.data_dir / "mail", smtp_port, ui_port)
    if proc is None:
        print("no mailpit built (infra/bootstrap.sh builds it): tickets are not mailed", flush=True)
        return None
    stack.procs["mailpit"] = proc.start()
    wait_port(smtp_port, proc=proc.popen)
    stack.env["TICKETRY_SMTP_URL"] = f"smtp://127.0.0.1:{smtp_port}"
    return f"http://127.0.0.1:{ui_port}"


def use_dev_wallet(stack: Stack, environ: Mapping[str, str]) -> Path | None:
    """Throw-away wallet credentials under ``.data/wallet`` (made once) unless
    ``environ`` names its own (``TICKETRY_WALLET_*``); the dev CA, or None."""
    if any(k.startswith("TICKETRY_WALLET_") for k in environ):
        return None
    stack.env.update(dev_wallet_env(stack.data_dir / "wallet"))
    return stack.data_dir / "wallet" / "ca.pem"


def renderers_min(env: Mapping[str, str]) -> int:
    """The scaler's floor in ``env`` (its default: 1)."""
    try:
        return int(env.get("TICKETRY_RENDERERS_MIN", "1"))
    except ValueError:
        return 1  # the scaler refuses it and exits; the wait says so


class Stopping:
    """Asked to stop: by SIGINT or SIGTERM (installed here) or by the caller."""

    def __init__(self) -> None:
        self._asked = False
        signal.signal(signal.SIGINT, self._on_signal)
        signal.signal(signal.SIGTERM, self._on_signal)

    def _on_signal(self, signum: int, _: object) -> None:
        self._asked = True

    def ask(self) -> None:
        self._asked = True

    def asked(self) -> bool:
        return self._asked


def up_ha(args: argparse.Namespace) -> int:
    """``up --ha``: three hosts (:mod:`ticketry_devstack.ha`) in the foreground
    until SIGINT/SIGTERM or one of its processes exits."""
    from ticketry_devstack.ha import PORTS, start_ha

    data: Path = args.data_dir
    pidfile = data / "stack.pid"
    stopping = Stopping()
    try:
        stack = start_ha(data / "ha", os.environ, cancelled=stopping.asked, log=lambda s: print(s, flush=True))
    except InterruptedError:
        return 130
    except (RuntimeError, TimeoutError, OSError) as exc:
        print(f"not up: {exc}", file=sys.stderr, flush=True)
        return 1
    try:
        pidfile.parent.mkdir(parents=True, exist_ok=True)
        pidfile.write_text(str(os.getpid()))
        a, b, c = (stack.hosts[h] for h in "abc")
        p = PORTS
        inbox = f"http://{stack.addr('c', 'mail')}" if ("c", "mailpit") in stack.procs else None
        mailbox = f"  mail inbox     {inbox}   (mailpit on c: the tickets mailed to buyers)\n" if inbox else ""
        own_wallet = any(k.startswith("TICKETRY_WALLET_") for k in os.environ)
        ca = stack.data_dir / "wallet" / "ca.pem"
        wallet = "" if own_wallet else f"  wallet         dev CA {ca}   (passes verify against it)\n"
        print(
            f"\nTicketry is up on three hosts (dev mode; logs in {data / 'ha'}/<host>/)\n"
            f"  host a  {a.address}  (netns {a.ns}): Redis primary :{p['redis']}, sentinel :{p['sentinel']}, "
            f"api :{p['api']}, notifier :{p['notifier']}, scaler + renderers\n"
            f"  host b  {b.address}  (netns {b.ns}): Redis replica :{p['redis']}, sentinel :{p['sentinel']}, "
            f"api :{p['api']}, notifier :{p['notifier']}, scaler + renderers\n"
            f"  host c  {c.address}  (netns {c.ns}): Redis replica :{p['redis']}, sentinel :{p['sentinel']}, "
            f"HAProxy :{stack.addr('c', 'lb').rsplit(':', 1)[1]}, "
            f"FerretDB :{p['mongo']}, S3 :{p['s3']}\n"
            f"  sentinels      {stack.sentinels} (master {stack.env['TICKETRY_REDIS_SENTINEL_MASTER']})\n"
            f"  HAProxy stats  {stack.stats_url}\n"
            f"  load balancer: {stack.lb_url}\n"
            f"{mailbox}{wallet}"
            "  Ctrl-C stops everything.\n",
            flush=True,
        )
        if args.demo:
            asyncio.run(demo(stack.lb_url, args.demo))
        while not stopping.asked():
            for (host, name), proc in stack.procs.items():
                if not proc.alive():
                    code = proc.popen.returncode if proc.popen else "?"
                    print(f"{name} on host {host} exited ({code}); stopping", file=sys.stderr)
                    stopping.ask()
            time.sleep(0.5)
    finally:
        print("stopping…", flush=True)
        stack.stop()
        pidfile.unlink(missing_ok=True)
    return 0


def up(args: argparse.Namespace) -> int:
    if args.ha:
        return up_ha(args)
    stack = build_stack(os.environ, args.data_dir)
    data = stack.data_dir
    pidfile = data / "stack.pid"
    stopping = Stopping()
    try:
        start_infra(stack, os.environ)
        inbox = start_mailbox(stack, os.environ)
        wallet_ca = use_dev_wallet(stack, os.environ)
        stack.start_api()
        stack.start_notifier()
        lb = start_balancer(stack, os.environ)
        scaler = stack.start_service("scaler")
        # "up" means a renderer is running, not that one will be: the first order
        # must not wait for a renderer to start (the scaler forks its floor first).
        if renderers_min(stack.env) > 0:
            print("waiting for the first renderer …", flush=True)
            try:
                if not stack.wait_renderers(1, starter=scaler, cancelled=stopping.asked):
                    return 130
            except (RuntimeError, TimeoutError) as exc:
                print(f"not up: {exc}", file=sys.stderr, flush=True)
                return 1
        pidfile.parent.mkdir(parents=True, exist_ok=True)
        pidfile.write_text(str(os.getpid()))
        balancer = f"  load balancer: {lb}   (HAProxy in front of the api, infra/haproxy/)\n" if lb else ""
        mailbox = f"  mail inbox {inbox}   (mailpit: the tickets mailed to buyers)\n" if inbox else ""
        wallet = f"  wallet     dev CA {wallet_ca}   (passes verify against it)\n" if wallet_ca else ""
        print(
            f"\nTicketry is up (dev mode; logs in {data / 'logs'})\n"
            f"  API        {stack.api_url}   docs: {stack.api_url}/docs\n"
            f"{balancer}"
            f"{mailbox}"
            f"{wallet}"
            f"  progress   {stack.notifier_url}/v1/orders/<order id>/progress?token=<JWT>\n"
            f"  Redis      {stack.env['TICKETRY_REDIS_URL']}\n"
            f"  MongoDB    {stack.env['TICKETRY_MONGO_URL']}\n"
            "  Ctrl-C stops everything.\n",
            flush=True,
        )
        if args.demo:
            asyncio.run(demo(stack.api_url, args.demo))
        while not stopping.asked():
            for name, proc in stack.procs.items():
                if not proc.alive():
                    print(f"{name} exited ({proc.popen.returncode if proc.popen else '?'}); stopping", file=sys.stderr)
                    stopping.ask()
            time.sleep(0.5)
    finally:
        print("stopping…", flush=True)
        stack.stop()
        pidfile.unlink(missing_ok=True)
    return 0


def show_env(_args: argparse.Namespace) -> int:
    """Print, as JSON, the ``TICKETRY_*`` settings ``just up`` would give its
    services, secrets hidden (starting Redis/FerretDB only where no URL is set, then
    stopping them)."""
    stack = build_stack(os.environ)
    try:
        start_infra(stack, os.environ)
        env = {k: v for k, v in stack.service_env().items() if k.startswith(PREFIX)}
        print(json.dumps(redacted(env), indent=2, sort_keys=True))
    finally:
        stack.stop()
    return 0


def down(args: argparse.Namespace) -> int:
    pidfile = args.data_dir / "stack.pid"
    if not pidfile.exists():
        print("no stack running")
        return 0
    pid = int(pidfile.read_text())
    try:
        os.kill(pid, signal.SIGTERM)
    except ProcessLookupError:
        pidfile.unlink(missing_ok=True)
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
    p_up.add_argument("--data-dir", type=Path, default=DATA, help="logs, stores and PDFs (default: .data)")
    p_up.add_argument(
        "--ha", action="store_true", help="three hosts (network namespaces): Redis + Sentinel, two apis behind HAProxy"
    )
    p_up.set_defaults(fn=up)
    p_down = sub.add_parser("down", help="stop a stack started in the background")
    p_down.add_argument("--data-dir", type=Path, default=DATA)
    p_down.set_defaults(fn=down)
    sub.add_parser("env", help="print the TICKETRY_* settings `up` would use").set_defaults(fn=show_env)
    p_demo = sub.add_parser("demo", help="place a demo order against a running stack")
    p_demo.add_argument("--api", default=f"http://127.0.0.1:{os.environ.get('TICKETRY_API_PORT', '8000')}")
    p_demo.add_argument("-n", type=int, default=20)
    p_demo.set_defaults(fn=lambda a: asyncio.run(demo(a.api, a.n)) or 0)
    args = parser.parse_args()
    rc: int = args.fn(args)
    return rc


if __name__ == "__main__":
    sys.exit(main())
