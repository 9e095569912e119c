"""The door never loses a scan: the /scan page's durable offline queue, in a
real headless Chromium against the real stack.

- 30 scans offline are written to IndexedDB before each answer shows; the
  browser process is killed (SIGKILL, as a phone that dies); a new browser on
  the same profile, online, shows the 30 pending and uploads each once.
- With the device's storage full (the profile's IndexedDB folder on a small
  tmpfs of the browser's own mount namespace, filled by the page until not
  even a few bytes fit), an offline scan shows the storage error, never an
  admit. (CDP ``Storage.overrideQuotaForOrigin`` changes the quota Chromium
  reports, not what its IndexedDB will write: tried, writes still succeed.)
- A browser killed as soon as the scanner shows after its set-up comes back
  signed in on that list: the sign-in is in IndexedDB, written durably before
  the scanner shows (localStorage, which Chromium writes lazily, lost it).
- A phone that opened the scanner once starts again while the api is down (its
  process stopped): the page opens from what its service worker kept, judges a
  code on the device and queues it; once the api is back the scan is uploaded.
- With WebCrypto's Ed25519 taken from the page (an init script that makes
  ``importKey``/``verify`` reject it, as a browser without it does), offline
  scans verify with the vendored @noble/ed25519 and a forged code is refused.

The codes are signed with the stack's own keyring, as the renderer signs them.
Every wait is for something to happen, bounded far above need (``WAIT_MS``).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import signal
import subprocess
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from playwright.async_api import BrowserContext, Route, ViewportSize, async_playwright, expect
from ticketry.codes import load_keyring
from ticketry_devstack.procs import Proc, Stack, free_port

from tests.conftest import TokenFactory
from tests.e2e.pages_support import CHROMIUM_ARGS, PHONE, QUEUED, WAIT_MS, browser, chromium_path
from tests.helpers import bearer, checkin_list, create_event, place_order, scan, start_api_of_its_own, until

pytestmark = pytest.mark.e2e

DOCS_IMG = Path(__file__).resolve().parents[2] / "docs" / "img"


# A browser without WebCrypto Ed25519 (Chromium before 137, Safari before 17,
# Firefox before 129): importKey and verify reject the algorithm as such a
# browser does (NotSupportedError), before the page's scripts run. It replaces
# a browser API, never our infrastructure; the refusals are counted.
NO_WEBCRYPTO_ED25519 = """
(() => {
  const subtle = crypto.subtle;
  const importKey = subtle.importKey.bind(subtle);
  const verify = subtle.verify.bind(subtle);
  const isEd = (alg) => String((alg && alg.name) || alg).toLowerCase() === "ed25519";
  window.__ed25519Refused = 0;
  const refuse = () => {
    window.__ed25519Refused += 1;
    return Promise.reject(new DOMException("Algorithm: Unrecognized name", "NotSupportedError"));
  };
  subtle.importKey = (format, data, alg, ...rest) => isEd(alg) ? refuse() : importKey(format, data, alg, ...rest);
  subtle.verify = (alg, ...rest) => isEd(alg) ? refuse() : verify(alg, ...rest);
})();
"""


def _browser_pid(profile: Path) -> int:
    """The browser process (not a renderer or helper: no ``--type=``) running on ``profile``."""
    found = []
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit():
            continue
        try:
            args = (proc / "cmdline").read_bytes().split(b"\0")
        except OSError:
            continue
        if f"--user-data-dir={profile}".encode() in args and not any(a.startswith(b"--type=") for a in args):
            found.append(int(proc.name))
    assert len(found) == 1, found
    return found[0]


def _gone(pid: int) -> bool:
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] == "Z"
    except OSError:
        return True


@contextlib.asynccontextmanager
async def persistent(profile: Path, executable: str | None = None) -> AsyncIterator[tuple[BrowserContext, int]]:
    """A headless Chromium on ``profile`` (new or kept from a browser before),
    and its browser process's id. A browser killed meanwhile is not closed again."""
    async with async_playwright() as pw:
        context = await pw.chromium.launch_persistent_context(
            str(profile), executable_path=executable or chromium_path(), args=CHROMIUM_ARGS, headless=True,
            viewport=ViewportSize(width=PHONE["width"], height=PHONE["height"]),
        )  # fmt: skip
        context.set_default_timeout(WAIT_MS)
        pid = _browser_pid(profile)
        try:
            yield context, pid
        finally:
            if not _gone(pid):
                await context.close()


async def list_status(api: httpx.AsyncClient, list_id: str, tok: str) -> dict[str, Any]:
    r = await api.get(f"/v1/checkin-lists/{list_id}/status", headers=bearer(tok))
    assert r.status_code == 200, r.text
    got: dict[str, Any] = r.json()
    return got


# Chromium in a mount namespace of its own (a user namespace mapped to root
# makes that possible without privileges), its profile's IndexedDB folder on a
# tmpfs of $SIZE there: a small disk for the page's storage, nothing else.
SMALL_DISK = """#!/bin/sh
exec unshare --user --map-root-user --mount sh -c '
  for a in "$@"; do case "$a" in --user-data-dir=*) p="${a#--user-data-dir=}";; esac; done
  mkdir -p "$p/Default/IndexedDB" && mount -t tmpfs -o size=$SIZE tmpfs "$p/Default/IndexedDB" && exec "$CHROMIUM" "$@"
' sh "$@"
"""

# Writes random (incompressible) bytes to a database of its own until not even
# 16 bytes fit: 64 KiB at a time, then ever smaller. The bytes written. On a
# full disk Chromium's IndexedDB may leave a write pending, neither done nor
# failed: one not done in 10 s counts as not fitting (and is aborted); after an
# I/O error the browser may close the connection, and nothing fits either.
FILL = """async () => {
  const db = await new Promise((resolve, reject) => {
    const open = indexedDB.open("filler", 1);
    open.onupgradeneeded = () => open.result.createObjectStore("junk", { autoIncrement: true });
    open.onsuccess = () => resolve(open.result);
    open.onerror = () => reject(open.error);
  });
  const put = (n) => new Promise((resolve) => {
    const bytes = new Uint8Array(n);
    for (let i = 0; i < n; i += 65536) crypto.getRandomValues(bytes.subarray(i, Math.min(n, i + 65536)));
    let tx;
    try {
      tx = db.transaction("junk", "readwrite");
      tx.objectStore("junk").add(bytes);
    } catch (e) {
      resolve(false); // the browser closed the connection: the disk failed it
      return;
    }
    const stuck = setTimeout(() => { try { tx.abort(); } catch (e) { /* done meanwhile */ } resolve(false); }, 10000);
    tx.oncomplete = () => { clearTimeout(stuck); resolve(true); };
    tx.onabort = () => { clearTimeout(stuck); resolve(false); };
  });
  let written = 0;
  for (const n of [65536, 4096, 256, 16]) {
    while (await put(n)) written += n;
  }
  db.close();
  return written;
}"""


def small_disk_chromium(where: Path, size: str) -> str:
    """A Chromium whose profile's IndexedDB lives on a tmpfs of ``size``;
    skipped where no mount namespace can be made."""
    probe = subprocess.run(["unshare", "--user", "--map-root-user", "--mount", "true"], capture_output=True)
    if probe.returncode != 0:
        pytest.skip(f"no mount namespace here for a small disk: {probe.stderr.decode().strip()}")
    script = where / "chromium-small-disk"
    script.write_text(SMALL_DISK.replace("$SIZE", size).replace("$CHROMIUM", chromium_path()))
    script.chmod(0o755)
    return str(script)


def signed_codes(stack: Stack, event_id: str, tickets: list[str]) -> list[str]:
    """The tickets' check-in codes, signed with the stack's keyring as the renderer signs them."""
    ring = load_keyring(Path(stack.env["TICKETRY_KEYS_DIR"]))
    return [ring.sign(t, event_id, "standard") for t in tickets]


def forged(code: str) -> str:
    """The code with one character of its signature changed (a character inside
    the signature: the last one's low bits are padding)."""
    head, _, sig = code.rpartition(".")
    i = len(sig) // 2
    return f"{head}.{sig[:i]}{'B' if sig[i] != 'B' else 'C'}{sig[i + 1 :]}"


async def test_thirty_offline_scans_outlive_a_killed_browser_and_reach_the_server_once(
    stack: Stack, api: httpx.AsyncClient, token: TokenFactory, tmp_path: Path
) -> None:
    org, buyer = token("door-q-org-1", "organizer"), token("door-q-buyer-1", "buyer")
    # Given an event with a door, 30 tickets of it, and door staff
    event = await create_event(api, org, capacity=100)
    door = await checkin_list(api, org, event["id"], name="Main door")
    order = (await place_order(api, buyer, event["id"], 30, holder_name="Ada Lovelace")).json()
    codes = signed_codes(stack, event["id"], order["tickets"])
    staff = token("door-q-staff-1", "staff", events=[event["id"]])
    profile = tmp_path / "profile"

    async with persistent(profile) as (context, pid):
        page = await context.new_page()
        await page.goto(f"{stack.api_url}/scan#token={staff}&list={door}")
        await expect(page.get_by_role("heading", level=1)).to_have_text("Main door")
        await expect(page.get_by_test_id("scan-sync")).to_have_attribute("data-count", "30")
        result, queue = page.get_by_test_id("scan-result"), page.get_by_test_id("scan-queue")
        code_box, submit = page.get_by_test_id("scan-input"), page.get_by_test_id("scan-submit")
        # When the network is gone and the 30 tickets are scanned
        await context.set_offline(True)
        await expect(page.get_by_test_id("scan-network")).to_have_attribute("data-online", "false")
        for n, code in enumerate(codes, start=1):
            await code_box.fill(code)
            await submit.click()
            # Then each is admitted on the device and counted on screen as waiting
            await expect(queue).to_have_attribute("data-count", str(n))
            await expect(result).to_have_attribute("data-outcome", "admitted")
        await expect(queue).to_have_text("30 offline scans wait to be uploaded.")
        where = DOCS_IMG if os.environ.get("TICKETRY_DOCS_SCREENSHOTS") == "1" else tmp_path
        await page.screenshot(path=str(where / "scan-offline.png"))
        # ...each kept in the device's queue with its nonce, none told to the server yet
        queued = await page.evaluate(QUEUED)
        assert [q["ticket"] for q in queued] == order["tickets"]
        nonces = [q["nonce"] for q in queued]
        assert len(set(nonces)) == 30
        assert (await list_status(api, door, staff))["admitted"] == 0

        # When the browser process is killed (as a phone that dies: no unload, no goodbye)
        os.kill(pid, signal.SIGKILL)
        await until(lambda: _gone(pid))

    # ...and a new browser starts on the same profile, online; its uploads wait at the door until seen
    posted: list[str] = []
    seen = asyncio.Event()

    async def held(route: Route) -> None:
        await seen.wait()
        posted.append(json.loads(route.request.post_data or "{}")["nonce"])
        await route.continue_()

    async with persistent(profile) as (context, pid2):
        assert pid2 != pid
        await context.route("**/v1/checkins", held)
        page = await context.new_page()
        await page.goto(f"{stack.api_url}/scan")
        queue = page.get_by_test_id("scan-queue")
        # Then the 30 scans are still counted on screen
        await expect(page.get_by_role("heading", level=1)).to_have_text("Main door")
        await expect(queue).to_have_attribute("data-count", "30")
        seen.set()
        # ...and are uploaded: the count goes to none, nothing conflicts
        await expect(queue).to_have_attribute("data-count", "0")
        await expect(page.get_by_test_id("scan-conflict")).to_have_count(0)
        assert await page.evaluate(QUEUED) == []
    # The server holds the 30 admissions, once each, from those scans' nonces
    assert (await list_status(api, door, staff))["admitted"] == 30
    assert set(posted) == set(nonces)
    for code in codes:
        again = await scan(api, staff, code, door)
        assert again.status_code == 409 and "checked_in_at" in again.json(), again.text


async def test_with_storage_full_an_offline_scan_shows_the_storage_error_never_an_admit(
    stack: Stack, api: httpx.AsyncClient, token: TokenFactory, tmp_path: Path
) -> None:
    org, buyer = token("door-q-org-2", "organizer"), token("door-q-buyer-2", "buyer")
    # Given a door and a ticket, and the scanner set up on it
    event = await create_event(api, org, capacity=50)
    door = await checkin_list(api, org, event["id"], name="Side door")
    order = (await place_order(api, buyer, event["id"], 1, holder_name="Grace Hopper")).json()
    [code] = signed_codes(stack, event["id"], order["tickets"])
    staff = token("door-q-staff-2", "staff", events=[event["id"]])

    small = small_disk_chromium(tmp_path, "256k")

    async with persistent(tmp_path / "profile", small) as (context, _):
        page = await context.new_page()
        await page.goto(f"{stack.api_url}/scan#token={staff}&list={door}")
        await expect(page.get_by_role("heading", level=1)).to_have_text("Side door")
        await expect(page.get_by_test_id("scan-sync")).to_have_attribute("data-state", "kept")
        result, queue = page.get_by_test_id("scan-result"), page.get_by_test_id("scan-queue")
        # ...when the device's storage is full
        written = await page.evaluate(FILL)
        assert written > 64 * 1024, written
        # ...and the network is gone
        await context.set_offline(True)
        await expect(page.get_by_test_id("scan-network")).to_have_attribute("data-online", "false")
        # When the (genuine) ticket is scanned
        await page.get_by_test_id("scan-input").fill(code)
        await page.get_by_test_id("scan-submit").click()
        # Then the page says the scan was not kept and must not admit; nothing waits to upload
        await expect(result).to_have_attribute("data-outcome", "storage-error")
        await expect(page.locator("#verdict")).to_have_text("Not saved: do not admit")
        await expect(queue).to_have_attribute("data-storage", "failed")
        await expect(queue).to_have_attribute("data-count", "0")
        await expect(queue).to_contain_text("cannot store offline scans")
        await expect(result).not_to_have_css("background-color", "rgb(10, 107, 44)")  # never the green
        history = page.locator("[data-testid=scan-history] li")
        assert await history.evaluate_all("rows => rows.map((li) => li.dataset.outcome)") == ["storage-error"]

        # When the network is back: the server never heard of it, and online the ticket is admitted, once
        await context.set_offline(False)
        await expect(page.get_by_test_id("scan-network")).to_have_attribute("data-online", "true")
        assert (await list_status(api, door, staff))["admitted"] == 0
        await page.get_by_test_id("scan-input").fill(code)
        await page.get_by_test_id("scan-submit").click()
        await expect(result).to_have_attribute("data-outcome", "admitted")
        await expect(page.locator("#holder")).to_have_text("Grace Hopper")
    assert (await list_status(api, door, staff))["admitted"] == 1


async def test_without_webcrypto_ed25519_offline_scans_verify_and_a_forged_code_is_refused(
    stack: Stack, api: httpx.AsyncClient, token: TokenFactory, tmp_path: Path
) -> None:
    org, buyer = token("door-q-org-3", "organizer"), token("door-q-buyer-3", "buyer")
    # Given a door and two tickets
    event = await create_event(api, org, capacity=50)
    door = await checkin_list(api, org, event["id"], name="East door")
    order = (await place_order(api, buyer, event["id"], 2, holder_name="Alan Turing")).json()
    first, second = signed_codes(stack, event["id"], order["tickets"])
    staff = token("door-q-staff-3", "staff", events=[event["id"]])

    async with browser(tmp_path / "profile") as context:
        # ...and a browser whose WebCrypto has no Ed25519
        await context.add_init_script(NO_WEBCRYPTO_ED25519)
        page = await context.new_page()
        await page.goto(f"{stack.api_url}/scan#token={staff}&list={door}")
        await expect(page.get_by_role("heading", level=1)).to_have_text("East door")
        # Then the page checks signatures with the vendored library
        await expect(page.locator("body")).to_have_attribute("data-ed25519", "noble")
        result, queue = page.get_by_test_id("scan-result"), page.get_by_test_id("scan-queue")
        code_box, submit = page.get_by_test_id("scan-input"), page.get_by_test_id("scan-submit")
        await context.set_offline(True)
        await expect(page.get_by_test_id("scan-network")).to_have_attribute("data-online", "false")

        # When a forged code is scanned offline (a genuine one's signature, one character changed)
        await code_box.fill(forged(first))
        await submit.click()
        # Then it is refused, by the fallback
        await expect(result).to_have_attribute("data-outcome", "unknown")
        await expect(page.locator("#detail")).to_have_text("Not a genuine ticket code.")
        await expect(result).to_have_attribute("data-verifier", "noble")
        # ...as is the second ticket's code carrying the first's signature
        await code_box.fill(f"{second.rpartition('.')[0]}.{first.rpartition('.')[2]}")
        await submit.click()
        await expect(page.locator("[data-testid=scan-history] li")).to_have_count(2)
        await expect(result).to_have_attribute("data-outcome", "unknown")
        await expect(page.locator("#detail")).to_have_text("Not a genuine ticket code.")
        await expect(queue).to_have_attribute("data-count", "0")
        # When the genuine codes are scanned offline, they verify and are admitted
        for n, code in enumerate((first, second), start=1):
            await code_box.fill(code)
            await submit.click()
            await expect(queue).to_have_attribute("data-count", str(n))
            await expect(result).to_have_attribute("data-outcome", "admitted")
            await expect(result).to_have_attribute("data-verifier", "noble")
        assert await page.evaluate("window.__ed25519Refused") >= 1  # WebCrypto was asked, and said no

        # When the network is back they are uploaded, and the server admits both
        await context.set_offline(False)
        await expect(queue).to_have_attribute("data-count", "0")
        await expect(page.get_by_test_id("scan-conflict")).to_have_count(0)
    assert (await list_status(api, door, staff))["admitted"] == 2


async def test_a_scanner_killed_right_after_its_set_up_is_still_set_up(
    stack: Stack, api: httpx.AsyncClient, token: TokenFactory, tmp_path: Path
) -> None:
    org = token("door-q-org-4", "organizer")
    # Given a door and its staff
    event = await create_event(api, org, capacity=5)
    door = await checkin_list(api, org, event["id"], name="West door")
    staff = token("door-q-staff-4", "staff", events=[event["id"]])
    profile = tmp_path / "profile"
    async with persistent(profile) as (context, pid):
        # When the scanner is set up from its link and the browser is killed as soon as it shows
        page = await context.new_page()
        await page.goto(f"{stack.api_url}/scan#token={staff}&list={door}")
        await expect(page.get_by_role("heading", level=1)).to_have_text("West door")
        os.kill(pid, signal.SIGKILL)
        await until(lambda: _gone(pid))
    # Then a new browser on the same profile opens the scanner on that door, signed in
    async with persistent(profile) as (context, _):
        page = await context.new_page()
        await page.goto(f"{stack.api_url}/scan")
        await expect(page.get_by_role("heading", level=1)).to_have_text("West door")
        await expect(page.locator("#scanner")).to_be_visible()


SHELL = ["/scan", "/assets/common.css", "/assets/scan.css", "/assets/scan.js"]
SHELL += ["/assets/vendor/jsqr/jsQR.js", "/assets/vendor/noble-ed25519/index.js"]
# What the scanner's service worker keeps (scan-sw.js), once it runs (within a minute).
SHELL_KEPT = """async () => {
  const later = new Promise((resolve) => setTimeout(() => resolve(null), 60000));
  if ((await Promise.race([navigator.serviceWorker.ready, later])) === null) return ["no service worker"];
  const cache = await caches.open("ticketry-scan-shell-v1");
  return (await cache.keys()).map((r) => new URL(r.url).pathname).sort();
}"""


async def test_a_phone_started_again_while_the_api_is_down_opens_the_scanner_and_queues_its_scans(
    stack: Stack, token: TokenFactory, tmp_path: Path
) -> None:
    # An api process of this test's own, stopped below: nothing answers on its port
    port = free_port()
    url = f"http://127.0.0.1:{port}"

    def start_api() -> Proc:
        return start_api_of_its_own(stack, "api-door", port, {"TICKETRY_RUN_PROJECTOR": "0"})

    proc = await asyncio.to_thread(start_api)
    try:
        org, buyer = token("door-sw-org-1", "organizer"), token("door-sw-buyer-1", "buyer")
        async with httpx.AsyncClient(base_url=url, timeout=60) as api:
            event = await create_event(api, org, capacity=10)
            door = await checkin_list(api, org, event["id"], name="Side door")
            order = (await place_order(api, buyer, event["id"], 2, holder_name="Grace Hopper")).json()
        codes = signed_codes(stack, event["id"], order["tickets"])
        staff = token("door-sw-staff-1", "staff", events=[event["id"]])
        profile = tmp_path / "profile"
        # Given a phone that opened the scanner once, online, and was switched off
        async with persistent(profile) as (context, _):
            page = await context.new_page()
            await page.goto(f"{url}/scan#token={staff}&list={door}")
            await expect(page.get_by_role("heading", level=1)).to_have_text("Side door")
            await expect(page.get_by_test_id("scan-sync")).to_have_attribute("data-count", "2")
            assert await page.evaluate(SHELL_KEPT) == sorted(SHELL)
        # When the api is gone and the phone starts again
        await asyncio.to_thread(proc.stop)
        async with persistent(profile) as (context, _):
            page = await context.new_page()
            await page.goto(f"{url}/scan")
            # Then the scanner opens from what it kept, signed in on its list
            await expect(page.get_by_role("heading", level=1)).to_have_text("Side door")
            # And a code is judged on the device and queued
            await page.get_by_test_id("scan-input").fill(codes[0])
            await page.get_by_test_id("scan-submit").click()
            await expect(page.get_by_test_id("scan-result")).to_have_attribute("data-outcome", "admitted")
            queue = page.get_by_test_id("scan-queue")
            await expect(queue).to_have_attribute("data-count", "1")
            # And once the api is back, the scan is uploaded
            proc = await asyncio.to_thread(start_api)
            await expect(queue).to_have_attribute("data-count", "0")
        async with httpx.AsyncClient(base_url=url, timeout=60) as api:
            assert (await list_status(api, door, staff))["admitted"] == 1
    finally:
        await asyncio.to_thread(proc.stop)
