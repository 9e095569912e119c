"""Headless Chromium for the pages' tests, and a fake camera that shows a ticket.

The browser is Debian's ``chromium`` (infra/bootstrap.sh installs it) driven
by Playwright, never a browser Playwright downloads. Each browser gets a fresh
profile and runs with nothing that reaches beyond this machine. The fake
camera is Chromium's own (``--use-file-for-fake-video-capture``) playing a
Y4M file: a header and raw I420 frames, made here from the ticket's PDF as
PDFium renders it. And a stand-in for the browser's ``BarcodeDetector``, which
Chromium on Linux lacks (``BARCODE_DETECTOR_STAND_IN``).
"""

from __future__ import annotations

import contextlib
import io
import os
import shutil
from collections.abc import AsyncIterator
from pathlib import Path

import pypdfium2
import zxingcpp
from PIL import Image
from playwright.async_api import BrowserContext, async_playwright, expect

CHROMIUM_ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]
PHONE = {"width": 360, "height": 780}
# A bound on a hang, never a timing claim: every wait is for an event.
WAIT_MS = 120_000
# ``expect(...)`` waits 5 s by default, which a loaded 2-core machine can miss.
expect.set_options(timeout=WAIT_MS)


def chromium_path() -> str:
    """Debian's Chromium binary (the /usr/bin/chromium wrapper only adds flags we set ourselves)."""
    for candidate in (os.environ.get("TICKETRY_CHROMIUM"), "/usr/lib/chromium/chromium", shutil.which("chromium")):
        if candidate and Path(candidate).is_file():
            return candidate
    raise FileNotFoundError("chromium not found: run infra/bootstrap.sh (it installs Debian's chromium)")


@contextlib.asynccontextmanager
async def browser(profile: Path, *, camera: Path | None = None) -> AsyncIterator[BrowserContext]:
    """A headless Chromium with a fresh profile in ``profile``, a phone-sized
    window; with ``camera``, a fake camera playing that Y4M file (allowed
    without asking)."""
    args = list(CHROMIUM_ARGS)
    if camera is not None:
        args += [
            "--use-fake-device-for-media-stream",
            "--use-fake-ui-for-media-stream",
            f"--use-file-for-fake-video-capture={camera}",
        ]
    profile.mkdir(parents=True, exist_ok=False)
    async with async_playwright() as pw:
        context = await pw.chromium.launch_persistent_context(
            str(profile),
            executable_path=chromium_path(),
            args=args,
            headless=True,
            viewport=PHONE,
            accept_downloads=True,
            permissions=["camera"] if camera is not None else [],
        )
        context.set_default_timeout(WAIT_MS)
        try:
            yield context
        finally:
            await context.close()


def qr_picture(pdf: bytes, size: tuple[int, int] = (640, 480)) -> Image.Image:
    """What a door camera sees of a ticket: its QR code (found on the page as
    PDFium renders it) with a quiet zone, filling most of a ``size`` frame."""
    doc = pypdfium2.PdfDocument(io.BytesIO(pdf))
    try:
        page = doc[0].render(scale=200 / 72).to_pil().convert("RGB")
    finally:
        doc.close()
    found = zxingcpp.read_barcodes(page)
    assert found, "no QR code on the ticket"
    pos = found[0].position
    xs = [pos.top_left.x, pos.top_right.x, pos.bottom_left.x, pos.bottom_right.x]
    ys = [pos.top_left.y, pos.top_right.y, pos.bottom_left.y, pos.bottom_right.y]
    margin = (max(xs) - min(xs)) // 6
    qr = page.crop((min(xs) - margin, min(ys) - margin, max(xs) + margin, max(ys) + margin))
    side = int(min(size) * 0.9)
    qr = qr.resize((side, side), Image.Resampling.NEAREST)
    frame = Image.new("RGB", size, "white")
    frame.paste(qr, ((size[0] - side) // 2, (size[1] - side) // 2))
    return frame


def write_y4m(path: Path, picture: Image.Image, frames: int = 2, fps: int = 10) -> Path:
    """``picture`` as a Y4M video of ``frames`` identical frames (4:2:0: full
    luma, chroma at half width and height), which Chromium's fake camera loops."""
    width, height = picture.size
    assert width % 2 == 0 and height % 2 == 0
    y, cb, cr = picture.convert("YCbCr").split()
    half = (width // 2, height // 2)
    planes = (
        y.tobytes()
        + cb.resize(half, Image.Resampling.BILINEAR).tobytes()
        + cr.resize(half, Image.Resampling.BILINEAR).tobytes()
    )
    with path.open("wb") as out:
        out.write(f"YUV4MPEG2 W{width} H{height} F{fps}:1 Ip A1:1 C420jpeg\n".encode())
        for _ in range(frames):
            out.write(b"FRAME\n" + planes)
    return path


# A stand-in for the browser's ``BarcodeDetector`` (Shape Detection API), which
# Chromium on Linux lacks: it replaces a browser API, never our infrastructure.
# ``detect(video)`` reads the real camera frame and decodes it with the page's
# own vendored jsQR (held aside: calls the page makes to ``window.jsQR`` are
# counted apart, so a test can tell the two branches apart). Like a guest
# holding a ticket up once and walking on, it reports each code once, then
# nothing. What it saw is in ``window.__barcodeStandIn``.
BARCODE_DETECTOR_STAND_IN = """
(() => {
  const seen = { supported: 0, constructed: [], detect: 0, found: [], pageJsqr: 0 };
  window.__barcodeStandIn = seen;
  let jsqr;
  Object.defineProperty(window, "jsQR", {
    configurable: true,
    get() {
      return jsqr && ((...args) => { seen.pageJsqr += 1; return jsqr(...args); });
    },
    set(value) { jsqr = value; },
  });
  class BarcodeDetector {
    constructor(options) {
      this.formats = (options && options.formats) || [];
      seen.constructed.push(this.formats.slice());
    }
    static async getSupportedFormats() {
      seen.supported += 1;
      return ["qr_code"];
    }
    async detect(source) {
      seen.detect += 1;
      const width = source.videoWidth || source.width;
      const height = source.videoHeight || source.height;
      if (!width || !height || !jsqr || !this.formats.includes("qr_code")) return [];
      const canvas = document.createElement("canvas");
      canvas.width = width;
      canvas.height = height;
      const ctx = canvas.getContext("2d", { willReadFrequently: true });
      ctx.drawImage(source, 0, 0, width, height);
      const found = jsqr(ctx.getImageData(0, 0, width, height).data, width, height);
      if (!found || seen.found.includes(found.data)) return [];
      seen.found.push(found.data);
      const loc = found.location;
      const corners = [loc.topLeftCorner, loc.topRightCorner, loc.bottomRightCorner, loc.bottomLeftCorner];
      const xs = corners.map((p) => p.x);
      const ys = corners.map((p) => p.y);
      const box = new DOMRectReadOnly(Math.min(...xs), Math.min(...ys),
        Math.max(...xs) - Math.min(...xs), Math.max(...ys) - Math.min(...ys));
      return [{ rawValue: found.data, format: "qr_code", boundingBox: box, cornerPoints: corners }];
    }
  }
  window.BarcodeDetector = BarcodeDetector;
})();
"""


# A stand-in for the browser's Web Audio ``AudioContext`` (headless Chromium
# plays to no speaker): it replaces a browser API, never our infrastructure.
# It records what the page schedules instead of playing it: each read of
# ``currentTime`` begins one sound (the page reads it once per sound, then
# schedules its tones from it), labelled with the answer the page shows at
# that moment (``#result``'s ``data-outcome``); each tone is its waveform,
# frequency, start (from the sound's beginning) and length. What it heard is in
# ``window.__sounds``.
AUDIO_STAND_IN = """
(() => {
  const sounds = [];
  window.__sounds = sounds;
  const round = (x) => Math.round(x * 1000) / 1000;
  class Param {
    constructor() { this.value = 0; }
    setValueAtTime() { return this; }
    linearRampToValueAtTime() { return this; }
    exponentialRampToValueAtTime() { return this; }
  }
  class Node {
    connect(next) { return next; }
    disconnect() {}
  }
  class AudioContext {
    constructor() {
      this.state = "running";
      this.destination = new Node();
      this.clock = 0;
    }
    get currentTime() {
      const result = document.getElementById("result");
      sounds.push({ outcome: result ? result.dataset.outcome : "", tones: [] });
      this.clock += 10;
      return this.clock;
    }
    resume() { this.state = "running"; return Promise.resolve(); }
    createGain() { return Object.assign(new Node(), { gain: new Param() }); }
    createOscillator() {
      const ctx = this;
      const sound = sounds[sounds.length - 1];
      const osc = Object.assign(new Node(), { type: "sine", frequency: new Param(), begins: 0 });
      osc.start = (at) => { osc.begins = at; };
      osc.stop = (at) => {
        const tone = [osc.type, osc.frequency.value, round(osc.begins - ctx.clock), round(at - osc.begins)];
        if (sound) sound.tones.push(tone);
      };
      return osc;
    }
  }
  window.AudioContext = AudioContext;
  window.webkitAudioContext = AudioContext;
})();
"""


# The scanner's offline queue (IndexedDB, read from the page's origin), in scan order.
QUEUED = """() => new Promise((resolve, reject) => {
  const open = indexedDB.open("ticketry-scan");
  open.onerror = () => reject(open.error);
  open.onsuccess = () => {
    const db = open.result;
    const all = db.transaction("queue").objectStore("queue").getAll();
    all.onsuccess = () => { db.close(); resolve(all.result.sort((a, b) => a.seq - b.seq)); };
    all.onerror = () => reject(all.error);
  };
})"""
