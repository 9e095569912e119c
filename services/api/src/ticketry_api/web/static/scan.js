// The door scanner (/scan#token=<staff JWT>&list=<check-in list id>, or a
// scanner paired as a device: /scan#pair=<pairing code>).
//
// Online, every scan is POST /v1/checkins with a nonce of its own. Offline (no
// network, or the api does not answer), the scanner judges a code itself as
// the server would: the Ed25519 signature with the public keys it keeps
// (GET /v1/checkins/keys), the code's event and tier against its list, the
// event's cancelled orders (GET /v1/events/{id}/revocations) and the tickets
// this device admitted. The signature is checked with WebCrypto's Ed25519, or,
// where the browser has none, with the vendored @noble/ed25519 (loaded with
// the page, so it is there once the network is gone).
//
// A scan judged offline is written to the device's queue (IndexedDB, a
// durable transaction) before its answer is shown: a scan that cannot be
// written is shown as such ("storage-error"), never as admitted, since nothing
// would ever tell the server. The queue survives reloads, a killed tab and a
// restarted phone; it is uploaded with its nonces when the network is back.
// The server answers a nonce once, so a re-upload is never a second check-in;
// a ticket that another door admitted meanwhile comes back 409 and is kept,
// once per scan, in the device's list of conflicts. What an older page kept in
// localStorage (its queue, conflicts and admitted tickets) is moved into
// IndexedDB at start.
//
// On a list that allows re-entry a switch says whether the door lets guests
// in or out; each scan carries that direction (queued offline scans too). The
// server decides who is inside: offline, such a scan is queued as it is.
//
// To name the guest offline, the device keeps the list's tickets (holder,
// tier, status; GET /v1/checkin-lists/{id}/tickets, every page) in IndexedDB,
// downloaded when a list is picked and when the network is back. Holder names
// are personal data: only the list this device scans on is kept (a download
// replaces every ticket on the device), and none once the list changes or the
// device is signed out.
"use strict";

(function () {
  const $ = (id) => document.getElementById(id);
  const store = window.localStorage; // only an older page's state, moved into IndexedDB
  const K = {
    token: "ticketry.scan.token",
    list: "ticketry.scan.list",
    cache: (list) => "ticketry.scan.cache." + list,
    // An older page's offline state, moved into IndexedDB at start (migrateLegacy).
    admitted: (list) => "ticketry.scan.admitted." + list,
    queue: "ticketry.scan.queue",
    conflicts: "ticketry.scan.conflicts",
  };
  const REPEAT_MS = 3000; // the same code in front of the camera again: scanned again after this
  const REQUEST_MS = 8000; // no answer by then: judged offline (its nonce makes a late answer harmless)
  const REFRESH_MS = 60000; // keys, list and revocations
  const DB_NAME = "ticketry-scan";
  // 1: tickets, downloads. 2: queue (by nonce), conflicts (by nonce), admitted ("<list>/<ticket>").
  // 3: device (by key): "signin" (the token and list) and "cache/<list>" (its keys and revocations).
  const DB_VERSION = 3;
  const MAX_CONFLICTS = 500; // the oldest go beyond this
  // A queue write not done by then is given up (aborted) and shown as the storage error:
  // on a full disk Chromium's IndexedDB can leave a small write pending, neither done nor failed.
  const WRITE_MS = 4000;
  // The Ed25519 fallback, fetched with the page (never first when offline).
  const NOBLE = "/assets/vendor/noble-ed25519/index.js";
  const SPKI_ED25519 = "302a300506032b6570032100"; // the DER prefix of a raw 32-byte Ed25519 key
  const TOKEN_CHECK_MS = 30000; // a device's token is refreshed once less than half its lifetime is left
  const TICKETS_PAGE = 1000; // tickets per request (the route's default)
  const MAX_TICKETS = 200000; // a bigger list is not kept (~40 MB): offline scans then show no names

  let token = null; // a staff JWT, or a paired device's access token
  let listId = null;
  let device = null; // a paired device: {id, secret, name}; its token expires at tokenExp (ms)
  let tokenExp = 0;
  let tokenTtl = 0;
  let cache = null; // {list, keys: {kid: pem}, revoked: [order ids], at}
  let busy = false;
  let last = { code: "", at: 0 };
  let uploading = false;
  let synced = null; // the kept tickets' download: {list, as_of, count, tiers: {id: name}}
  let generation = 0; // bumped whenever the kept tickets are forgotten: a download begun before is not kept
  const keyObjects = new Map();
  let pending = 0; // offline scans in the queue, as last counted
  let storageFailed = false; // the last write to the queue failed
  let webcryptoEd25519 = null; // null: not tried yet; false: this browser has none (the fallback verifies)
  const noble = import(NOBLE).catch(() => null);

  // --- storage -------------------------------------------------------------
  function load(key, fallback) {
    try {
      const raw = store.getItem(key);
      return raw === null ? fallback : JSON.parse(raw);
    } catch (e) {
      return fallback;
    }
  }

  // --- the fragment: token and list, kept on the device (signIn), cleared from the URL ---
  const fragment = new URLSearchParams(location.hash.slice(1));
  if (location.hash) history.replaceState(null, "", location.pathname + location.search);

  // --- network state ---------------------------------------------------------
  function online() {
    return navigator.onLine !== false;
  }

  function showNetwork() {
    const el = $("net");
    const on = online();
    el.dataset.online = String(on);
    el.textContent = on ? "online" : "offline";
  }

  async function api(path, options) {
    if (device && Date.now() > tokenExp - tokenTtl / 2) await freshToken();
    let r = await request(path, options);
    // A device's token that expired or was refused: refreshed once (a revoked device learns it here).
    if (r.status === 401 && device && (await freshToken())) r = await request(path, options);
    return r;
  }

  async function request(path, options) {
    const ctl = new AbortController();
    const timer = setTimeout(() => ctl.abort(), REQUEST_MS);
    try {
      return await fetch(path, {
        ...options,
        signal: ctl.signal,
        credentials: "omit",
        headers: { Authorization: "Bearer " + token, "Content-Type": "application/json", ...((options || {}).headers || {}) },
      });
    } finally {
      clearTimeout(timer);
    }
  }

  // --- sound -----------------------------------------------------------------
  let audio = null;
  function unlockAudio() {
    try {
      if (!audio) audio = new (window.AudioContext || window.webkitAudioContext)();
      if (audio.state === "suspended") audio.resume();
    } catch (e) { audio = null; }
  }

  function beep(outcome) {
    if (!audio) return;
    const tones = {
      admitted: [[880, 0, 0.15]],
      already: [[520, 0, 0.12], [520, 0.18, 0.12]],
      wrong_list: [[220, 0, 0.45]],
      unknown: [[180, 0, 0.45]],
      revoked: [[180, 0, 0.2], [180, 0.25, 0.2]],
      "storage-error": [[150, 0, 0.2], [150, 0.25, 0.2], [150, 0.5, 0.2]],
    }[outcome] || [];
    const now = audio.currentTime;
    for (const [freq, at, len] of tones) {
      const osc = audio.createOscillator();
      const gain = audio.createGain();
      osc.type = outcome === "admitted" ? "sine" : "square";
      osc.frequency.value = freq;
      gain.gain.setValueAtTime(0.0001, now + at);
      gain.gain.exponentialRampToValueAtTime(0.25, now + at + 0.01);
      gain.gain.exponentialRampToValueAtTime(0.0001, now + at + len);
      osc.connect(gain).connect(audio.destination);
      osc.start(now + at);
      osc.stop(now + at + len + 0.02);
    }
  }

  // --- showing an answer ------------------------------------------------------
  const VERDICT = {
    admitted: "Admitted", already: "Already checked in", wrong_list: "Wrong list", unknown: "Unknown code", revoked: "Revoked code",
    exited: "Left", not_inside: "Not inside", "storage-error": "Not saved: do not admit",
  };

  // --- entry or exit (lists that allow re-entry) -------------------------------
  function reentry() {
    return Boolean(cache && cache.list && cache.list.allow_reentry);
  }

  function direction() {
    const exit = document.querySelector('input[name="direction"][value="exit"]');
    return reentry() && exit.checked ? "exit" : "entry";
  }

  // A scan's body, with its direction where it has one (none on a list without re-entry).
  function directed(body, dir) {
    return dir ? { ...body, direction: dir } : body;
  }

  function showDirection() {
    $("direction").hidden = !reentry();
    document.querySelector('[data-testid="scan-submit"]').textContent = direction() === "exit" ? "Check out" : "Check in";
  }

  // An answer: its verdict, the guest's name and the ticket's tier (by id), and a detail.
  function show(outcome, holder, detail, tier) {
    const box = $("result");
    const tierText = tierName(tier);
    box.dataset.outcome = outcome;
    $("verdict").textContent = VERDICT[outcome] || outcome;
    $("holder").textContent = holder || "";
    $("detail").textContent = [tierText, detail].filter(Boolean).join(" · ");
    beep(outcome);
    // The last scans, newest first: what the door saw when a guest asks.
    const li = document.createElement("li");
    li.dataset.outcome = outcome;
    li.textContent = [new Date().toLocaleTimeString(), VERDICT[outcome] || outcome, holder, tierText].filter(Boolean).join(" · ");
    const history = $("history");
    history.prepend(li);
    while (history.childElementCount > 20) history.lastElementChild.remove();
  }

  function timeOf(iso) {
    try {
      return new Date(iso).toLocaleTimeString(undefined, { hour: "2-digit", minute: "2-digit" });
    } catch (e) {
      return iso;
    }
  }

  function tierName(tier) {
    const name = synced && synced.list === listId && synced.tiers[tier];
    return tier ? "Tier: " + (name || tier) : "";
  }

  // --- codes, judged offline --------------------------------------------------
  function b64urlBytes(text) {
    const b64 = text.replace(/-/g, "+").replace(/_/g, "/") + "===".slice((text.length + 3) % 4);
    const raw = atob(b64);
    const out = new Uint8Array(raw.length);
    for (let i = 0; i < raw.length; i++) out[i] = raw.charCodeAt(i);
    return out;
  }

  function publicKeyDer(kid) {
    const pem = cache && cache.keys[kid];
    if (!pem) return null;
    const body = pem.replace(/-----[^-]+-----/g, "").replace(/\s+/g, "");
    return Uint8Array.from(atob(body), (c) => c.charCodeAt(0));
  }

  function hex(bytes) {
    return Array.from(bytes, (b) => b.toString(16).padStart(2, "0")).join("");
  }

  // Whether ``sig`` is the key ``kid``'s signature of ``signed``: WebCrypto's
  // Ed25519, or the vendored one where the browser has none. Which one judged
  // is on the result box (data-verifier).
  async function verified(kid, sig, signed) {
    const der = publicKeyDer(kid);
    if (!der) return false;
    if (webcryptoEd25519 !== false) {
      try {
        let key = keyObjects.get(kid);
        if (!key) {
          key = await crypto.subtle.importKey("spki", der, { name: "Ed25519" }, false, ["verify"]);
          keyObjects.set(kid, key);
        }
        const ok = await crypto.subtle.verify({ name: "Ed25519" }, key, sig, signed);
        webcryptoEd25519 = true;
        $("result").dataset.verifier = "webcrypto";
        return ok;
      } catch (e) {
        if (webcryptoEd25519 === true) return false; // a key WebCrypto refused: not a genuine one
        webcryptoEd25519 = false;
      }
    }
    const ed = await noble;
    $("result").dataset.verifier = "noble";
    if (!ed || der.length !== 44 || hex(der.slice(0, 12)) !== SPKI_ED25519) return false;
    try {
      // zip215 false: RFC 8032's strict check, as the server's OpenSSL does.
      return await ed.verifyAsync(sig, signed, der.slice(12), { zip215: false });
    } catch (e) {
      return false;
    }
  }

  // Which Ed25519 this browser checks signatures with, found at start (on
  // <body data-ed25519>: "webcrypto", "noble", or "none" when neither works).
  async function probeEd25519() {
    const basePoint = new Uint8Array(32).fill(0x66);
    basePoint[0] = 0x58; // a valid public key: the curve's base point
    try {
      await crypto.subtle.importKey("raw", basePoint, { name: "Ed25519" }, false, ["verify"]);
      if (webcryptoEd25519 === null) webcryptoEd25519 = true;
    } catch (e) {
      webcryptoEd25519 = false;
    }
    document.body.dataset.ed25519 = webcryptoEd25519 ? "webcrypto" : (await noble) ? "noble" : "none";
  }

  // What the server would answer, from what this device knows: {outcome, ticket, event, tier, detail}.
  async function judge(code) {
    const parts = code.split(".");
    if (parts[0] === "TK1" && parts.length === 4) {
      return { outcome: "unknown", detail: "An older code (no event in it): it can only be checked online." };
    }
    // TK3: a re-issued ticket's code, its version signed too.
    const bound = (parts[0] === "TK2" && parts.length === 6) || (parts[0] === "TK3" && parts.length === 7);
    if (!bound) return { outcome: "unknown" };
    const [, kid, ticket, event, tier] = parts;
    const sig = parts[parts.length - 1];
    if (!/^tk_[0-9a-f]{20}_[0-9]{5}$/.test(ticket) || !/^ev_[0-9a-f]{20}$/.test(event)) return { outcome: "unknown" };
    if (!cache || !cache.list) return { outcome: "unknown", detail: "This device has no keys yet: it must be online once." };
    let genuine = false;
    try {
      const signed = new TextEncoder().encode(code.slice(0, code.lastIndexOf(".")));
      genuine = await verified(kid, b64urlBytes(sig), signed);
    } catch (e) {
      genuine = false;
    }
    if (!genuine) return { outcome: "unknown", detail: "Not a genuine ticket code." };
    if ((cache.revoked || []).includes("or_" + ticket.slice(3, 23))) return { outcome: "unknown", detail: "Cancelled." };
    if ((cache.codes || []).includes(code)) {
      return { outcome: "revoked", ticket, event, tier, detail: "This code was replaced: the ticket was re-issued." };
    }
    const list = cache.list;
    if (event !== list.event_id || (list.tiers.length && !list.tiers.includes(tier))) {
      return { outcome: "wrong_list", ticket, event, tier, detail: "Not for " + list.name + "." };
    }
    return { outcome: "admitted", ticket, event, tier };
  }

  // Whether this device admitted the ticket on this list (online or offline).
  async function admittedHere(ticket) {
    try {
      const db = await openDb();
      return Boolean(await result(db.transaction("admitted").objectStore("admitted").get(listId + "/" + ticket)));
    } catch (e) {
      return false; // no storage: the queue's write fails too, and says so
    }
  }

  // An online admission, remembered for offline judging (the server holds it already).
  async function rememberAdmitted(ticket) {
    if (!ticket) return;
    try {
      const db = await openDb();
      const tx = db.transaction("admitted", "readwrite");
      tx.objectStore("admitted").put({ key: listId + "/" + ticket });
      await finished(tx);
    } catch (e) { /* only offline judging uses it; the server would answer a repeat as a conflict */ }
  }

  // --- scanning ----------------------------------------------------------------
  function newNonce() {
    const bytes = crypto.getRandomValues(new Uint8Array(12));
    return "scan-" + Array.from(bytes, (b) => b.toString(16).padStart(2, "0")).join("");
  }

  // One scan at a time, in the order they came (a typed code waits for the camera's scan in flight).
  let chain = Promise.resolve();
  function scan(raw) {
    const run = chain.then(() => scanNow(raw));
    chain = run.catch(() => {});
    return run;
  }

  async function scanNow(raw) {
    const code = (raw || "").trim();
    if (!code || !listId) return;
    busy = true;
    const dir = reentry() ? direction() : null;
    try {
      const nonce = newNonce();
      if (online()) {
        let r = null;
        try {
          r = await api("/v1/checkins", { method: "POST", body: JSON.stringify(directed({ code, list_id: listId, nonce }, dir)) });
        } catch (e) {
          r = null; // no network after all, or no answer in time
        }
        if (r && r.status < 500 && r.status !== 429) {
          await answered(r, code);
          return;
        }
        if (r && r.status === 429) {
          show("unknown", "", "Too many scans: wait a moment and scan again.");
          return;
        }
      }
      await scanOffline(code, nonce, dir);
    } finally {
      busy = false;
      showNetwork();
    }
  }

  async function answered(r, code) {
    let body = {};
    try { body = await r.json(); } catch (e) { body = {}; }
    if (r.status === 200 && body.direction === "exit") {
      show("exited", body.holder_name, "", body.tier);
    } else if (r.status === 200) {
      rememberAdmitted(body.ticket_id); // not awaited: the answer shows at once
      show("admitted", body.holder_name, "", body.tier);
    } else if (r.status === 409 && String(body.type || "").endsWith("/not-inside")) {
      show("not_inside", body.holder_name, body.detail || "", body.tier);
    } else if (r.status === 409 && String(body.type || "").endsWith("/wrong-list")) {
      show("wrong_list", "", body.detail || "", body.tier);
    } else if (r.status === 409 && String(body.type || "").endsWith("/revoked")) {
      show("revoked", "", "This code was replaced: the ticket was re-issued.");
    } else if (r.status === 409 && body.checked_in_at) {
      rememberAdmitted(body.ticket_id); // not awaited: the answer shows at once
      show("already", body.holder_name, "First checked in at " + timeOf(body.checked_in_at) + ".", body.tier);
    } else if (r.status === 409) {
      show("already", body.holder_name, body.detail || "", body.tier);
    } else if (r.status === 401 || r.status === 403) {
      show("unknown", "", r.status === 401 ? "This device's token is no longer valid: sign in again." : "This token may not scan on this list.");
      if (r.status === 401 && token) setup("The staff token is invalid or expired.");
    } else {
      // 404: forged, unknown or cancelled; the server says no more, on purpose.
      show("unknown", "", "Not a valid ticket for this event (forged, unknown or cancelled).");
    }
  }

  async function scanOffline(code, nonce, dir) {
    const judged = await judge(code);
    const note = "Offline: judged on this device; it uploads when the network is back.";
    if (judged.outcome !== "admitted") {
      show(judged.outcome, "", judged.detail, judged.tier);
      return;
    }
    const known = await keptTicket(judged.ticket);
    if (known && known.status === "cancelled") {
      show("unknown", known.holder, "Cancelled (as of this device's last download).");
      return;
    }
    const item = { code, list_id: listId, nonce, ticket: judged.ticket, tier: judged.tier, at: new Date().toISOString(), seq: nextSeq() };
    if (reentry()) {
      // Who is inside is the server's to say: the scan is queued as it is, its direction with it.
      if (!(await enqueue({ ...item, direction: dir }, false))) return;
      show(dir === "exit" ? "exited" : "admitted", known ? known.holder : "Name unknown", note, judged.tier);
      return;
    }
    if (await admittedHere(judged.ticket)) {
      show("already", known ? known.holder : judged.ticket, "Already admitted by this device.", judged.tier);
      return;
    }
    if (known && known.status === "checked_in") {
      const when = known.at ? " at " + timeOf(known.at) : "";
      show("already", known.holder, "First checked in" + when + " (as of this device's last download).", judged.tier);
      return;
    }
    if (!(await enqueue(item, true))) return;
    if (known) {
      show("admitted", known.holder, note, judged.tier);
    } else {
      // A genuine code of a ticket the kept list does not have (sold after its
      // download, or none kept): admitted, green, without a name, as pretixSCAN
      // does (libpretixsync's checkOfflineWithoutData: a valid signature, not
      // revoked, of a product the list admits is VALID). The signature, the
      // revocations and the list's tiers judge a code; the kept tickets only name it.
      show("admitted", "Name unknown", "Not in this device's ticket list (sold after its last download?) · " + note, judged.tier);
    }
  }

  // --- the offline queue (IndexedDB) ---------------------------------------------
  let seqLast = 0;
  function nextSeq() {
    // Upload order: the order of the scans (an entry before its exit), unique within this device.
    seqLast = Math.max(seqLast + 1, Date.now() * 1000);
    return seqLast;
  }

  // Writes a scan to the queue (and, for an admission, the ticket to this
  // device's admitted ones) in one durable transaction. False, with the
  // storage error shown, when it could not be written: the scan then never
  // counts as admitted.
  async function enqueue(item, admits) {
    let tx = null;
    const write = async () => {
      const db = await openDb();
      tx = db.transaction(["queue", "admitted"], "readwrite", { durability: "strict" });
      tx.objectStore("queue").put(item);
      if (admits) tx.objectStore("admitted").put({ key: item.list_id + "/" + item.ticket });
      await finished(tx);
    };
    try {
      await deadline(write(), WRITE_MS, () => tx && tx.abort());
    } catch (e) {
      storageFailed = true;
      show("storage-error", "", "This device could not keep the scan (" + ((e && e.name) || "storage unavailable")
        + "), so the server would never hear of it. Do not admit on this scan: check the ticket at a door that is online.");
      await showQueue();
      return false;
    }
    storageFailed = false;
    await showQueue();
    return true;
  }

  // ``work``, or a TimeoutError after ``ms`` (``giveUp`` called first, its own error ignored).
  function deadline(work, ms, giveUp) {
    let timer;
    const late = new Promise((resolve, reject) => {
      timer = setTimeout(() => {
        try { giveUp(); } catch (e) { /* already done or failed */ }
        reject(new DOMException("the storage did not answer", "TimeoutError"));
      }, ms);
    });
    return Promise.race([work, late]).finally(() => clearTimeout(timer));
  }

  async function queued() {
    const db = await openDb();
    const items = await result(db.transaction("queue").objectStore("queue").getAll());
    return items.sort((a, b) => (a.seq || 0) - (b.seq || 0));
  }

  async function showQueue() {
    try {
      const db = await openDb();
      pending = await result(db.transaction("queue").objectStore("queue").count());
    } catch (e) { /* the last count stands */ }
    const el = $("queue");
    el.dataset.count = String(pending);
    el.dataset.storage = storageFailed ? "failed" : "ok";
    const waiting = pending ? pending + (pending === 1 ? " offline scan waits" : " offline scans wait") + " to be uploaded." : "";
    const failed = storageFailed ? "This device cannot store offline scans: offline, nothing is admitted." : "";
    el.textContent = [waiting, failed].filter(Boolean).join(" ");
  }

  async function showConflicts() {
    let conflicts = [];
    try {
      const db = await openDb();
      conflicts = await result(db.transaction("conflicts").objectStore("conflicts").getAll());
    } catch (e) { /* none to show */ }
    conflicts.sort((a, b) => String(b.at).localeCompare(String(a.at))); // newest first
    const ul = $("conflicts");
    ul.replaceChildren(
      ...conflicts.map((c) => {
        const li = document.createElement("li");
        li.dataset.testid = "scan-conflict";
        li.dataset.ticket = c.ticket || "";
        li.dataset.kind = c.kind;
        li.textContent = [timeOf(c.at), c.text].join(" · ");
        return li;
      })
    );
    $("conflict-count").textContent = String(conflicts.length);
    $("conflicts-box").dataset.count = String(conflicts.length);
    $("conflicts-box").hidden = conflicts.length === 0;
  }

  // What the server's answer to an uploaded scan says about it: a conflict {kind, text}, or null (accepted).
  function conflictOf(item, r, body) {
    const who = body.holder_name ? item.ticket + " (" + body.holder_name + ")" : item.ticket;
    const type = String(body.type || "");
    if (r.status === 409 && type.endsWith("/not-inside")) {
      return { kind: "not_inside", text: "Ticket " + who + " was let out offline, but it was not inside." };
    } else if (r.status === 409 && type.endsWith("/wrong-list")) {
      return { kind: "wrong_list", text: "Ticket " + who + " was let in offline, but it is not for this list." };
    } else if (r.status === 409 && type.endsWith("/revoked")) {
      return { kind: "revoked", text: "Ticket " + who + " was let in offline with a code its re-issue had replaced." };
    } else if (r.status === 409) {
      const when = body.checked_in_at ? " at " + timeOf(body.checked_in_at) : "";
      return { kind: "already", text: "Ticket " + who + " was let in offline here, but another door had checked it in" + when + "." };
    } else if (r.status === 404) {
      return { kind: "unknown", text: "Ticket " + who + " was let in offline, but it is no longer valid (cancelled)." };
    } else if (r.status === 403) {
      return { kind: "unknown", text: "Ticket " + who + ": this token may no longer scan on this list." };
    }
    return null;
  }

  async function upload() {
    if (uploading || !token || !online()) return;
    uploading = true;
    try {
      await migrateLegacy();
      for (;;) {
        let items;
        try { items = await queued(); } catch (e) { break; }
        if (!items.length) break;
        const item = items[0];
        let r;
        try {
          r = await api("/v1/checkins", {
            method: "POST", body: JSON.stringify(directed({ code: item.code, list_id: item.list_id, nonce: item.nonce }, item.direction)),
          });
        } catch (e) {
          break; // still offline: next time
        }
        if (r.status === 429 || r.status >= 500 || r.status === 401) break;
        let body = {};
        try { body = await r.json(); } catch (e) { body = {}; }
        const found = conflictOf(item, r, body);
        // Answered (200 or a conflict): it leaves the queue, its conflict kept in the same transaction.
        try {
          const db = await openDb();
          const tx = db.transaction(["queue", "conflicts"], "readwrite", { durability: "strict" });
          tx.objectStore("queue").delete(item.nonce);
          // One conflict per queued scan (its nonce), however often its upload is answered.
          if (found) tx.objectStore("conflicts").put({ nonce: item.nonce, ticket: item.ticket, ...found, at: new Date().toISOString() });
          await finished(tx);
        } catch (e) {
          break; // kept in the queue: uploaded (the same answer) next time
        }
        await showQueue();
        if (found) {
          await trimConflicts();
          await showConflicts();
          $("conflicts-box").open = true;
          beep("already");
        }
      }
    } finally {
      uploading = false;
      await showQueue();
    }
  }

  async function trimConflicts() {
    try {
      const db = await openDb();
      const all = await result(db.transaction("conflicts").objectStore("conflicts").getAll());
      if (all.length <= MAX_CONFLICTS) return;
      all.sort((a, b) => String(a.at).localeCompare(String(b.at)));
      const tx = db.transaction("conflicts", "readwrite");
      for (const c of all.slice(0, all.length - MAX_CONFLICTS)) tx.objectStore("conflicts").delete(c.nonce);
      await finished(tx);
    } catch (e) { /* kept, all of them */ }
  }

  // An older page kept its queue, conflicts and admitted tickets in localStorage:
  // moved into IndexedDB in one transaction, then removed there. A scan moved
  // twice (a page that died between the two) is only uploaded twice with its nonce.
  async function migrateLegacy() {
    const queue = load(K.queue, []);
    const conflicts = load(K.conflicts, []);
    const admittedKeys = [];
    for (let i = 0; i < store.length; i++) {
      const key = store.key(i);
      if (key && key.startsWith(K.admitted(""))) admittedKeys.push(key);
    }
    const legacy = [K.queue, K.conflicts].filter((k) => store.getItem(k) !== null).concat(admittedKeys);
    if (!legacy.length) return;
    try {
      const db = await openDb();
      const tx = db.transaction(["queue", "conflicts", "admitted"], "readwrite", { durability: "strict" });
      for (const item of Array.isArray(queue) ? queue : []) {
        if (item && item.nonce && item.code && item.list_id) tx.objectStore("queue").put({ ...item, seq: item.seq || nextSeq() });
      }
      for (const c of Array.isArray(conflicts) ? conflicts : []) {
        if (c && c.nonce) tx.objectStore("conflicts").put(c);
      }
      for (const key of admittedKeys) {
        const list = key.slice(K.admitted("").length);
        for (const ticket of load(key, [])) tx.objectStore("admitted").put({ key: list + "/" + ticket });
      }
      await finished(tx);
    } catch (e) {
      return; // left where it is: moved at the next start or upload
    }
    legacy.forEach((k) => store.removeItem(k));
    await showQueue();
    await showConflicts();
  }

  // --- how this device signs in (IndexedDB, durably) ------------------------------
  // The token and list live in the device's database, written with strict
  // durability and awaited before the page counts a set-up as done:
  // localStorage reaches the disk lazily (seconds later in Chromium), so a
  // phone that died right after being set up would have lost them. An older
  // page's localStorage sign-in is moved in at start.
  async function keptSignIn() {
    try {
      const db = await openDb();
      return (await result(db.transaction("device").objectStore("device").get("signin"))) || null;
    } catch (e) {
      return null;
    }
  }

  // Writes the current sign-in (or its absence); false when the storage would not keep it.
  async function keepSignIn() {
    let tx = null;
    const write = async () => {
      const db = await openDb();
      tx = db.transaction("device", "readwrite", { durability: "strict" });
      if (token) tx.objectStore("device").put({ key: "signin", token, list: listId, device, tokenExp, tokenTtl });
      else tx.objectStore("device").delete("signin");
      await finished(tx);
    };
    try {
      await deadline(write(), WRITE_MS, () => tx && tx.abort());
      return true;
    } catch (e) {
      return false; // kept in memory only: this page works, a restart asks again
    }
  }

  async function keptCache(list) {
    try {
      const db = await openDb();
      const got = await result(db.transaction("device").objectStore("device").get("cache/" + list));
      if (got) return got.cache;
    } catch (e) { /* an older page's, below */ }
    return load(K.cache(list), null);
  }

  async function keepCache(list, value) {
    try {
      const db = await openDb();
      const tx = db.transaction("device", "readwrite", { durability: "strict" });
      tx.objectStore("device").put({ key: "cache/" + list, cache: value });
      await finished(tx);
      store.removeItem(K.cache(list));
    } catch (e) { /* judged with what is in memory; downloaded again at the next refresh */ }
  }

  // At start: the kept sign-in (or an older page's, moved in), then the fragment's.
  async function start() {
    let kept = await keptSignIn();
    if (!kept && store.getItem(K.token)) {
      kept = { token: store.getItem(K.token), list: store.getItem(K.list) };
      token = kept.token;
      listId = kept.list;
      if (await keepSignIn()) [K.token, K.list].forEach((k) => store.removeItem(k));
    }
    token = kept ? kept.token : null;
    listId = kept ? kept.list : null;
    device = kept && kept.device ? kept.device : null;
    tokenExp = kept ? kept.tokenExp || 0 : 0;
    tokenTtl = kept ? kept.tokenTtl || 0 : 0;
    if (fragment.get("pair")) {
      if (await pairWith(fragment.get("pair"))) await begin();
      return;
    }
    if (fragment.get("token")) device = null; // a staff token replaces a paired device's
    // Another staff token or another list than the device kept: the kept tickets go.
    const changedHands = (fragment.get("token") && fragment.get("token") !== token)
      || (fragment.get("list") && fragment.get("list") !== listId);
    if (fragment.get("token")) token = fragment.get("token");
    if (fragment.get("list")) listId = fragment.get("list");
    if (changedHands) {
      await keepSignIn();
      await forgetTickets();
    }
    await begin();
  }

  // --- a scanner paired as a device ---------------------------------------------------
  // /scan#pair=<code> (or the code typed) pairs once: the device secret that
  // answers is kept in IndexedDB (strict durability, before the scanner shows)
  // and buys short-lived access tokens for its one list, refreshed before they
  // expire. A revoked device hears 401 with the revocation time: the scans it
  // queued after that time are never uploaded, each becomes a conflict; those
  // made before wait for a staff sign-in on this page to upload them.
  async function post(path, body) {
    const ctl = new AbortController();
    const timer = setTimeout(() => ctl.abort(), REQUEST_MS);
    try {
      return await fetch(path, {
        method: "POST", body: JSON.stringify(body), signal: ctl.signal, credentials: "omit",
        headers: { "Content-Type": "application/json" },
      });
    } finally {
      clearTimeout(timer);
    }
  }

  function tokenFrom(answer) {
    token = answer.access_token;
    tokenTtl = answer.expires_in * 1000;
    tokenExp = Date.now() + tokenTtl;
  }

  async function pairWith(code) {
    let r;
    try {
      r = await post("/v1/devices/pair", { code: String(code).trim() });
    } catch (e) {
      setup("No network: this device cannot be paired now.");
      return false;
    }
    if (!r.ok) {
      setup({
        404: "That pairing code is unknown or was used already: ask for a new one.",
        410: "That pairing code has expired: ask for a new one.", 422: "That is not a pairing code.",
      }[r.status] || "The device could not be paired (" + r.status + ").");
      return false;
    }
    const c = await r.json();
    if (c.list_id !== listId) await forgetTickets();
    device = { id: c.device_id, secret: c.secret, name: c.name };
    listId = c.list_id;
    tokenFrom(c);
    if (!(await keepSignIn())) $("setup-notice").textContent = "This device could not store its pairing: it lasts until the page closes.";
    return true;
  }

  let refreshing = null;
  function freshToken() {
    if (!refreshing) refreshing = refreshToken().finally(() => { refreshing = null; });
    return refreshing;
  }

  // A new access token for the paired device; false when there is none (offline, or refused).
  async function refreshToken() {
    if (!device || !online()) return false;
    let r;
    try {
      r = await post("/v1/devices/token", { secret: device.secret });
    } catch (e) {
      return false;
    }
    if (r.status === 401) {
      let body = {};
      try { body = await r.json(); } catch (e) { body = {}; }
      await deviceRevoked(body.revoked_at || null);
      return false;
    }
    if (!r.ok) return false;
    tokenFrom(await r.json());
    await keepSignIn();
    return true;
  }

  async function deviceRevoked(revokedAt) {
    const at = revokedAt ? Date.parse(revokedAt) : NaN;
    if (!Number.isNaN(at)) {
      try {
        const late = (await queued()).filter((item) => Date.parse(item.at) > at);
        if (late.length) {
          const db = await openDb();
          const tx = db.transaction(["queue", "conflicts"], "readwrite", { durability: "strict" });
          for (const item of late) {
            tx.objectStore("queue").delete(item.nonce);
            tx.objectStore("conflicts").put({
              nonce: item.nonce, ticket: item.ticket, kind: "device_revoked", at: new Date().toISOString(),
              text: "Ticket " + item.ticket + " was let in offline at " + timeOf(item.at) + ", after this device was revoked ("
                + timeOf(revokedAt) + "): never uploaded.",
            });
          }
          await finished(tx);
        }
      } catch (e) { /* left in the queue: a staff sign-in uploads them, and the server judges */ }
    }
    device = null;
    token = null;
    tokenExp = 0;
    await keepSignIn();
    await forgetTickets();
    await showQueue();
    await showConflicts();
    const waiting = pending ? " " + pending + " offline scans made before then wait: sign in with a staff token to upload them." : "";
    setup((revokedAt ? "This device was revoked at " + timeOf(revokedAt) : "This device's pairing is no longer valid")
      + ": pair it again." + waiting);
  }

  // --- what the device keeps: list, keys, revocations ------------------------------
  async function refresh() {
    if (!token || !listId || !online()) return false;
    try {
      const lr = await api("/v1/checkin-lists/" + encodeURIComponent(listId));
      if (lr.status === 401) {
        if (token) setup("The staff token is invalid or expired.");
        return false;
      }
      if (lr.status === 403 || lr.status === 404) {
        listId = null;
        keepSignIn();
        forgetTickets();
        setup(lr.status === 403 ? "This token may not scan on that list." : "That check-in list does not exist.");
        return false;
      }
      if (!lr.ok) return false;
      const list = await lr.json();
      // Revoked codes only grow: ask for those since the last answer and keep the union.
      const prev = cache && cache.list && cache.list.event_id === list.event_id && cache.codesAsOf ? cache : null;
      const since = prev ? "?since=" + encodeURIComponent(prev.codesAsOf) : "";
      const [kr, rr] = await Promise.all([
        api("/v1/checkins/keys"),
        api("/v1/events/" + encodeURIComponent(list.event_id) + "/revocations" + since),
      ]);
      if (!kr.ok || !rr.ok) return false;
      const keys = (await kr.json()).keys;
      const rv = await rr.json();
      const codes = Array.from(new Set([...(prev ? prev.codes || [] : []), ...(rv.codes || []).map((c) => c.code)]));
      cache = { list, keys, revoked: rv.orders, codes, codesAsOf: rv.as_of, at: new Date().toISOString() };
      keyObjects.clear();
      keepCache(listId, cache);
      $("list-name").textContent = list.name;
      showDirection();
      return true;
    } catch (e) {
      return false;
    }
  }

  // --- the device's database (IndexedDB): the list's tickets, the offline queue --------
  let opened = null;
  function openDb() {
    if (!opened) {
      // Bounded, as the writes are: a disk in trouble can leave an open pending.
      opened = deadline(new Promise((resolve, reject) => {
        const req = indexedDB.open(DB_NAME, DB_VERSION);
        req.onupgradeneeded = () => {
          const db = req.result;
          const make = (name, keyPath) => { if (!db.objectStoreNames.contains(name)) db.createObjectStore(name, { keyPath }); };
          make("tickets", "key"); // "<list>/<ticket>"
          make("downloads", "list");
          make("queue", "nonce"); // offline scans waiting to be uploaded
          make("conflicts", "nonce"); // what their uploads were answered with, when not accepted
          make("admitted", "key"); // "<list>/<ticket>": admitted by this device
          make("device", "key"); // "signin": how this device signs in; "cache/<list>": what it judges with
        };
        req.onsuccess = () => {
          const db = req.result;
          // A newer page in another tab upgrades the database: this one lets go and opens it again.
          db.onversionchange = () => { db.close(); opened = null; };
          db.onclose = () => { opened = null; };
          resolve(db);
        };
        req.onerror = () => reject(req.error);
        req.onblocked = () => reject(new DOMException("another tab holds an older scanner open", "InvalidStateError"));
      }), WRITE_MS, () => {});
      opened.catch(() => { opened = null; });
    }
    return opened;
  }

  function finished(tx) {
    return new Promise((resolve, reject) => {
      tx.oncomplete = () => resolve();
      tx.onerror = () => reject(tx.error);
      tx.onabort = () => reject(tx.error);
    });
  }

  function result(req) {
    return new Promise((resolve, reject) => {
      req.onsuccess = () => resolve(req.result);
      req.onerror = () => reject(req.error);
    });
  }

  // The kept ticket of the current list: {holder, tier, status, at}, or null.
  async function keptTicket(ticket) {
    if (!synced || synced.list !== listId) return null;
    try {
      const db = await openDb();
      return (await result(db.transaction("tickets").objectStore("tickets").get(listId + "/" + ticket))) || null;
    } catch (e) {
      return null;
    }
  }

  async function loadDownload() {
    try {
      const db = await openDb();
      const got = await result(db.transaction("downloads").objectStore("downloads").get(listId || ""));
      if (got && got.list === listId) synced = got;
    } catch (e) { /* nothing kept */ }
    showSync();
  }

  // Every kept ticket goes (signing out, another list, another token).
  async function forgetTickets() {
    generation += 1;
    synced = null;
    showSync();
    try {
      const db = await openDb();
      const tx = db.transaction(["tickets", "downloads"], "readwrite");
      tx.objectStore("tickets").clear();
      tx.objectStore("downloads").clear();
      await finished(tx);
    } catch (e) { /* nothing to forget */ }
  }

  // The list's tickets, every page, then kept in place of anything kept before.
  let downloading = null;
  function downloadTickets() {
    if (!downloading) downloading = downloadNow().finally(() => { downloading = null; });
    return downloading;
  }

  async function downloadNow() {
    if (!token || !listId || !online()) return false;
    const list = listId;
    const began = generation;
    showSync("downloading");
    try {
      const rows = [];
      const tiers = {};
      let cursor = null;
      let asOf = null;
      do {
        const query = "?limit=" + TICKETS_PAGE + (cursor ? "&cursor=" + encodeURIComponent(cursor) : "");
        const r = await api("/v1/checkin-lists/" + encodeURIComponent(list) + "/tickets" + query);
        if (!r.ok) { showSync("failed"); return false; }
        const page = await r.json();
        asOf = asOf || page.as_of;
        for (const t of page.tiers) tiers[t.id] = t.name;
        for (const t of page.items) {
          rows.push({ key: list + "/" + t.id, holder: t.holder_name, tier: t.tier.id, status: t.status, at: t.checked_in_at || null });
        }
        if (rows.length > MAX_TICKETS) {
          await forgetTickets();
          showSync("too_many");
          return false;
        }
        cursor = page.next;
      } while (cursor);
      const download = { list, as_of: asOf, count: rows.length, tiers };
      const db = await openDb();
      // Checked right before the transaction: one that forgets, begun later, runs after this one.
      if (began !== generation || list !== listId) return false;
      const tx = db.transaction(["tickets", "downloads"], "readwrite");
      tx.objectStore("tickets").clear();
      tx.objectStore("downloads").clear();
      for (const row of rows) tx.objectStore("tickets").put(row);
      tx.objectStore("downloads").put(download);
      await finished(tx);
      if (began !== generation) return false;
      synced = download;
      showSync();
      return true;
    } catch (e) {
      showSync("failed");
      return false;
    }
  }

  function showSync(state) {
    const el = $("sync");
    const kept = synced && synced.list === listId ? synced : null;
    el.dataset.state = state || (kept ? "kept" : "none");
    el.dataset.count = String(kept ? kept.count : 0);
    el.textContent = {
      downloading: "Downloading this list's tickets…",
      failed: "This list's tickets could not be downloaded: offline scans show no names.",
      too_many: "This list has too many tickets to keep on this device: offline scans show no names.",
    }[state] || (kept ? kept.count + (kept.count === 1 ? " ticket" : " tickets") + " of this list on this device (as of "
      + timeOf(kept.as_of) + ")." : "");
  }

  // --- the camera ---------------------------------------------------------------------
  let stream = null;
  let detector = null;

  async function startCamera() {
    unlockAudio();
    if (stream) { stopCamera(); return; }
    const note = $("camera-note");
    if (!navigator.mediaDevices || !navigator.mediaDevices.getUserMedia) {
      note.textContent = "This browser has no camera access here; type the code instead.";
      return;
    }
    try {
      stream = await navigator.mediaDevices.getUserMedia({ video: { facingMode: "environment" }, audio: false });
    } catch (e) {
      note.textContent = "The camera could not be opened (" + e.name + "); type the code instead.";
      stream = null;
      return;
    }
    const video = $("video");
    video.srcObject = stream;
    video.hidden = false;
    await video.play().catch(() => {});
    detector = null;
    if ("BarcodeDetector" in window) {
      try {
        const formats = await window.BarcodeDetector.getSupportedFormats();
        if (formats.includes("qr_code")) detector = new window.BarcodeDetector({ formats: ["qr_code"] });
      } catch (e) { detector = null; }
    }
    note.textContent = "Camera on (" + (detector ? "built-in detector" : "jsQR") + "). Hold a ticket's QR code in view.";
    $("camera-toggle").textContent = "Stop camera";
    requestAnimationFrame(frame);
  }

  function stopCamera() {
    if (stream) stream.getTracks().forEach((t) => t.stop());
    stream = null;
    $("video").hidden = true;
    $("camera-toggle").textContent = "Use camera";
    $("camera-note").textContent = "";
  }

  async function decodeFrame(video) {
    if (detector) {
      const found = await detector.detect(video);
      return found.length ? found[0].rawValue : null;
    }
    if (typeof window.jsQR !== "function") return null;
    const canvas = $("frame");
    const scale = Math.min(1, 800 / Math.max(video.videoWidth, video.videoHeight));
    canvas.width = Math.round(video.videoWidth * scale);
    canvas.height = Math.round(video.videoHeight * scale);
    const ctx = canvas.getContext("2d", { willReadFrequently: true });
    ctx.drawImage(video, 0, 0, canvas.width, canvas.height);
    const img = ctx.getImageData(0, 0, canvas.width, canvas.height);
    const found = window.jsQR(img.data, img.width, img.height, { inversionAttempts: "attemptBoth" });
    return found ? found.data : null;
  }

  let lastFrame = 0;
  async function frame(now) {
    if (!stream) return;
    const video = $("video");
    if (now - lastFrame > 200 && video.readyState >= 2 && !busy) {
      lastFrame = now;
      try {
        const code = await decodeFrame(video);
        const at = Date.now();
        if (code && (code !== last.code || at - last.at > REPEAT_MS)) {
          await scan(code);
          last = { code, at: Date.now() };
        }
      } catch (e) { /* a frame that could not be read */ }
    }
    requestAnimationFrame(frame);
  }

  // --- set-up -------------------------------------------------------------------------
  function claims(jwt) {
    try {
      return JSON.parse(new TextDecoder().decode(b64urlBytes(jwt.split(".")[1])));
    } catch (e) {
      return {};
    }
  }

  function setup(message) {
    stopCamera();
    $("scanner").hidden = true;
    $("setup").hidden = false;
    $("setup-notice").textContent = message || "";
    const staffToken = device ? "" : token || ""; // a device's token is never shown as a staff token
    $("setup-token").value = staffToken;
    const events = claims(staffToken).events || [];
    $("setup-events").replaceChildren(...events.map((e) => Object.assign(document.createElement("option"), { value: e })));
    if (events.length && !$("setup-event").value) $("setup-event").value = events[0];
    $("setup-lists").hidden = true;
    document.body.dataset.signin = "none";
  }

  async function loadLists(ev) {
    ev.preventDefault();
    const t = $("setup-token").value.trim();
    const eventId = $("setup-event").value.trim();
    if (!t || !eventId) {
      $("setup-notice").textContent = "Enter the staff token and the event.";
      return;
    }
    token = t;
    device = null;
    await keepSignIn();
    let r;
    try {
      r = await api("/v1/events/" + encodeURIComponent(eventId) + "/checkin-lists");
    } catch (e) {
      $("setup-notice").textContent = "No network: the lists cannot be loaded.";
      return;
    }
    if (!r.ok) {
      $("setup-notice").textContent = {
        401: "That token is invalid or expired.", 403: "That token may not scan for this event.",
        404: "No such event.", 422: "That is not an event id.",
      }[r.status] || "The lists could not be loaded (" + r.status + ").";
      return;
    }
    const lists = (await r.json()).items;
    const box = $("setup-list-options");
    box.replaceChildren(
      ...lists.map((l) => {
        const b = document.createElement("button");
        b.type = "button";
        b.className = "secondary list-option";
        b.textContent = l.name + (l.tiers.length ? " (" + l.tiers.join(", ") + ")" : " (all tiers)");
        b.addEventListener("click", () => choose(l.id));
        return b;
      })
    );
    $("setup-lists").hidden = false;
    $("setup-notice").textContent = lists.length ? "" : "This event has no check-in lists yet.";
  }

  async function choose(id) {
    if (id !== listId || (synced && synced.list !== id)) await forgetTickets();
    listId = id;
    await keepSignIn(); // kept (durably) before the scanner shows: a phone that dies now is still set up
    await begin();
  }

  async function begin() {
    if (!token || !listId) {
      setup(token ? "Choose a check-in list." : "");
      return;
    }
    cache = await keptCache(listId);
    if (cache && cache.list) $("list-name").textContent = cache.list.name;
    showDirection();
    $("setup").hidden = true;
    $("scanner").hidden = false;
    document.body.dataset.signin = device ? "device" : "staff";
    $("change-list").hidden = Boolean(device); // a paired device scans on its own list
    showNetwork();
    await migrateLegacy();
    await showQueue();
    await showConflicts();
    await loadDownload();
    await refresh();
    if (!listId) return;
    upload();
    downloadTickets();
    $("code").focus();
  }

  // --- wiring ---------------------------------------------------------------------------
  $("manual").addEventListener("submit", async (ev) => {
    ev.preventDefault();
    unlockAudio();
    const input = $("code");
    const code = input.value;
    await scan(code);
    input.value = "";
    input.focus();
  });
  $("camera-toggle").addEventListener("click", startCamera);
  $("direction").addEventListener("change", showDirection);
  $("setup-form").addEventListener("submit", loadLists);
  $("pair-form").addEventListener("submit", async (ev) => {
    ev.preventDefault();
    const code = $("setup-pair").value.trim();
    if (!code) { $("setup-notice").textContent = "Enter the pairing code."; return; }
    if (await pairWith(code)) { $("setup-pair").value = ""; await begin(); }
  });
  $("change-list").addEventListener("click", () => {
    listId = null;
    keepSignIn();
    forgetTickets();
    setup("Choose a check-in list.");
  });
  $("forget").addEventListener("click", async () => {
    await showQueue();
    if (pending && !window.confirm("Offline scans are still waiting to upload. Sign out anyway?")) return;
    token = null;
    listId = null;
    device = null;
    await keepSignIn();
    forgetTickets();
    try {
      const db = await openDb();
      const tx = db.transaction(["queue", "conflicts", "admitted"], "readwrite");
      ["queue", "conflicts", "admitted"].forEach((name) => tx.objectStore(name).clear());
      await finished(tx);
    } catch (e) { /* nothing kept */ }
    await showQueue();
    await showConflicts();
    setup("");
  });
  // Back online: the queue first, so the download that follows has its admissions.
  window.addEventListener("online", () => { showNetwork(); refresh().then(upload).then(downloadTickets); });
  window.addEventListener("offline", showNetwork);
  setInterval(() => { if (online()) upload(); }, 5000);
  setInterval(() => { refresh(); }, REFRESH_MS);
  setInterval(() => { if (device && online() && Date.now() > tokenExp - tokenTtl / 2) freshToken(); }, TOKEN_CHECK_MS);

  // The page and its files kept for a start without a network (scan-sw.js).
  if ("serviceWorker" in navigator) navigator.serviceWorker.register("/scan-sw.js", { scope: "/scan" }).catch(() => {});
  probeEd25519();
  start();
})();
