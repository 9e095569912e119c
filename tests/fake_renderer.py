"""A stand-in renderer that follows the renderer's process contract: named by
TICKETRY_RENDERER_NAME, drains and exits 0 on SIGTERM. It marks its start and its
SIGTERM as files in FAKE_OUT. FAKE_MODE=ignore-term ignores SIGTERM; crash exits
3 at once. Run as a script (exec'd) or as the entry ``tests.fake_renderer:run``
(forked from a preloaded server)."""

import os
import signal
import sys
import time


def run() -> None:
    out, name, pid = os.environ["FAKE_OUT"], os.environ["TICKETRY_RENDERER_NAME"], os.getpid()
    mode = os.environ.get("FAKE_MODE", "ok")
    open(os.path.join(out, f"{name}.{pid}.start"), "w").close()
    if mode == "crash":
        sys.exit(3)

    def term(signum: int, frame: object) -> None:
        open(os.path.join(out, f"{name}.{pid}.term"), "w").close()
        if mode != "ignore-term":
            sys.exit(0)

    signal.signal(signal.SIGTERM, term)
    while True:
        time.sleep(0.05)


if __name__ == "__main__":
    run()
