"""`just up`: a TICKETRY_* value set in the environment always wins over the
devstack's own defaults (CONTRACT: Settings)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from ticketry_devstack.__main__ import build_stack, start_infra
from ticketry_devstack.env import merge, redacted, up_env

USER = {
    "TICKETRY_STORAGE_DIR": "/srv/tickets",
    "TICKETRY_KEYS_DIR": "/srv/keys",
    "TICKETRY_NOTIFIER_PUBLIC_URL": "wss://progress.example.test",
    "TICKETRY_DEV_MODE": "0",
    # Running servers: the devstack starts neither (nothing connects in these tests).
    "TICKETRY_REDIS_URL": "redis://redis.invalid:6379/0",
    "TICKETRY_MONGO_URL": "mongodb://user:hunter2@mongo.invalid:27017/ticketry",
}


def test_merge_lets_every_ticketry_value_of_the_environment_win() -> None:
    defaults = {"TICKETRY_DEV_MODE": "1", "TICKETRY_STORAGE_DIR": ".data/tickets", "TICKETRY_LOG_LEVEL": "INFO"}
    environ = {"TICKETRY_STORAGE_DIR": "/srv/tickets", "HOME": "/root", "PATH": "/bin"}
    assert merge(defaults, environ) == {
        "TICKETRY_DEV_MODE": "1",
        "TICKETRY_STORAGE_DIR": "/srv/tickets",
        "TICKETRY_LOG_LEVEL": "INFO",
    }
    # An explicit empty value is a choice too.
    assert merge(defaults, {"TICKETRY_LOG_LEVEL": ""})["TICKETRY_LOG_LEVEL"] == ""
    assert up_env({})["TICKETRY_DEV_MODE"] == "1"
    assert up_env({"TICKETRY_DEV_MODE": "0"})["TICKETRY_DEV_MODE"] == "0"


def test_the_up_stack_keeps_user_values_and_fills_in_the_rest(tmp_path: Path) -> None:
    # Given a user who set where tickets, keys and the public progress URL are
    stack = build_stack(USER, data=tmp_path)
    # When the devstack works out its services' environment (with the URLs set,
    # it starts no process)
    start_infra(stack, USER)
    try:
        assert not stack.procs
        env = stack.service_env()
        # Then the user's values reach the services untouched
        for key, value in USER.items():
            assert env[key] == value, key
        # And what the user left unset still gets the devstack's default
        assert env["TICKETRY_API_PORT"] == "8000" and env["TICKETRY_NOTIFIER_PORT"] == "8001"
    finally:
        stack.stop()

    # Without user values the devstack's own defaults apply (under its data dir).
    plain = build_stack({k: USER[k] for k in ("TICKETRY_REDIS_URL", "TICKETRY_MONGO_URL")}, data=tmp_path)
    start_infra(plain, USER)
    env = plain.service_env()
    assert env["TICKETRY_STORAGE_DIR"] == str(tmp_path / "tickets")
    assert env["TICKETRY_KEYS_DIR"] == str(tmp_path / "keys")
    assert env["TICKETRY_NOTIFIER_PUBLIC_URL"] == "ws://127.0.0.1:8001"
    assert env["TICKETRY_DEV_MODE"] == "1"


def test_devstack_env_command_reports_the_users_values() -> None:
    # The real entry point (`python -m ticketry_devstack env`), in a process of its own.
    environ = {**os.environ, **USER, "TICKETRY_JWT_SECRET": "x" * 40, "TICKETRY_API_PORT": "18000"}
    out = subprocess.run(
        [sys.executable, "-m", "ticketry_devstack", "env"],
        env=environ, capture_output=True, text=True, timeout=120, check=True,
    )  # fmt: skip
    env = json.loads(out.stdout)
    for key in ("TICKETRY_STORAGE_DIR", "TICKETRY_KEYS_DIR", "TICKETRY_NOTIFIER_PUBLIC_URL", "TICKETRY_REDIS_URL"):
        assert env[key] == USER[key], key
    assert env["TICKETRY_API_PORT"] == "18000"
    # Secrets are never printed.
    assert env["TICKETRY_JWT_SECRET"] == "<set>"
    assert env["TICKETRY_MONGO_URL"] == "mongodb://user:***@mongo.invalid:27017/ticketry"
    assert "hunter2" not in out.stdout and "x" * 40 not in out.stdout


def test_redacted_keeps_plain_values() -> None:
    assert redacted({"TICKETRY_LOG_LEVEL": "INFO", "TICKETRY_REDIS_URL": "redis://h:6379/0"}) == {
        "TICKETRY_LOG_LEVEL": "INFO",
        "TICKETRY_REDIS_URL": "redis://h:6379/0",
    }
