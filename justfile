# Ticketry — every entry point. `just` lists them.
set shell := ["bash", "-euo", "pipefail", "-c"]

default:
    @just --list

# Install whatever is missing (apt, uv, FerretDB build, Python env). Idempotent.
[group('setup')]
bootstrap:
    infra/bootstrap.sh

# Run the whole stack in the foreground (Redis, FerretDB, api, notifier, scaler + renderers).
[group('run')]
up *ARGS: bootstrap
    uv run --frozen python -m ticketry_devstack up {{ARGS}}

# Stop a stack started in the background (`just up &`).
[group('run')]
down:
    uv run --frozen python -m ticketry_devstack down

# Place a demo order of N tickets against the running stack and show its progress.
[group('run')]
demo N="20":
    uv run --frozen python -m ticketry_devstack demo -n {{N}}

# The test suite against real Redis and FerretDB it starts itself, on
# TICKETRY_TEST_WORKERS xdist workers (default 2; each starts its own stack;
# a file's tests run on one worker, in order, sharing its module fixtures).
# Without the scenarios marked slow: `just test-slow` runs those (CI runs both).
[group('check')]
test *ARGS: bootstrap
    uv run --frozen pytest -n "${TICKETRY_TEST_WORKERS:-2}" --dist loadfile -m "not slow" {{ARGS}}

# The slow lane: scenarios of minutes each (the several-host topology under
# kills and cuts, kill loops, racing histories), as `just test` runs the rest.
[group('check')]
test-slow *ARGS: bootstrap
    uv run --frozen pytest -n "${TICKETRY_TEST_WORKERS:-2}" --dist loadfile -m slow {{ARGS}}

# ruff + mypy --strict on every package.
[group('check')]
lint:
    uv run --frozen ruff check .
    uv run --frozen ruff format --check .
    uv run --frozen mypy shared/src services/api/src services/renderer/src services/notifier/src services/scaler/src infra/devstack/src bench

# Benchmarks: start the real stack, run each scenario, print one table.
[group('check')]
bench *ARGS: bootstrap
    uv run --frozen python -m bench {{ARGS}}
