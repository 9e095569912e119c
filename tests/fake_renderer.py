"""A stand-in renderer that follows the renderer's process contract: named by
TICKETRY_RENDERER_NAME, drains and exits 0 on SIGTERM. It marks its start and its
SIGTERM as files in FAKE_OUT; a start mark holds the moment it was written
(``time.monotonic()``: one clock for every process on the host), so a test can
measure the gaps between restarts. FAKE_MODE=ignore-term ignores SIGTERM; crash
exits 3 at once. Run as a script (exec'd) or as the entry
``tests.fake_renderer:run`` (forked from a preloaded server)."""

import os
import signal
import sys
import time


def run() -> None:
    out, name, pid = os.environ["FAKE_OUT"], os.environ["TICKETRY_RENDERER_NAME"], os.getpid()
    mode = os.environ.get("FAKE_MODE", "ok")

    def term(signum: int, frame: object) -> None:
        open(os.path.join(out, f"{name}.{pid}.term"), "w").close()
        if mode != "ignore-term":
            sys.exit(0)

    # The handler before the start mark: a test that saw the mark may SIGTERM
    # at once, and must then see the term mark, however slow this start was.
    signal.signal(signal.SIGTERM, term)
    mark = os.path.join(out, f"{name}.{pid}.start")
    with open(mark + ".tmp", "w") as f:
        f.write(repr(time.monotonic()))
    os.replace(mark + ".tmp", mark)  # seen whole or not at all
    if mode == "crash":
        sys.exit(3)
    while True:
        time.sleep(0.05)


if __name__ == "__main__":
    run()
