// The buyer's page of one order (/o/<order id>#t=<order link>).
//
// The order link comes in the URL's fragment (never sent to a server), is
// cleared from the address bar at once and kept in this tab's session storage.
// The page exchanges it once for an HttpOnly cookie scoped to this order's
// page (so each ticket's download is a plain link), reads the order, then
// follows its progress socket: a snapshot, then one message per ticket. When
// the socket drops it reconnects with after=<last message id>, so no ticket
// is missed; while it has no link to open a socket with, it polls the order.
"use strict";

(function () {
  const orderId = decodeURIComponent(location.pathname.split("/")[2] || "");
  const linkKey = "ticketry.order-link." + orderId;
  const $ = (id) => document.getElementById(id);
  const FINAL = new Set(["completed", "partially_failed", "failed", "cancelled"]);

  let token = null;
  let progressUrl = null;
  let partSize = 250;
  let lastId = null;
  let socket = null;
  let retries = 0;
  let retryTimer = null;
  let refreshTimer = null;
  let refreshes = 0;
  let stopped = false;
  let resuming = false; // this socket replays what came after lastId (after its snapshot)
  let lingerTimer = null;
  let replaying = false; // a finished order's replay is still coming in
  const counters = { total: 0, rendered: 0, failed: 0 };
  let status = "processing";
  const rows = new Map(); // ticket id -> {li, state}
  const wallets = { apple: false, google: false }; // which wallets a rendered ticket can go into

  // --- the link ------------------------------------------------------------
  const fragment = new URLSearchParams(location.hash.slice(1));
  if (fragment.get("t")) {
    token = fragment.get("t");
    try { sessionStorage.setItem(linkKey, token); } catch (e) { /* private mode: keep it in memory */ }
    history.replaceState(null, "", location.pathname + location.search);
  } else {
    try { token = sessionStorage.getItem(linkKey); } catch (e) { token = null; }
  }

  function authHeaders() {
    return token ? { Authorization: "Bearer " + token } : {};
  }

  function notice(text, isError) {
    const el = $("notice");
    el.textContent = text || "";
    el.classList.toggle("error", Boolean(isError));
  }

  // --- rendering -------------------------------------------------------------
  function publicStatus() {
    if (status === "cancelled") return "cancelled";
    if (status !== "completed") return status;
    if (counters.failed === 0) return "completed";
    return counters.rendered === 0 ? "failed" : "partially_failed";
  }

  function showProgress() {
    const shown = publicStatus();
    const el = $("status");
    if (el.textContent !== shown) {
      el.textContent = shown;
      el.dataset.status = shown;
    }
    const text = counters.rendered + " / " + counters.total;
    if ($("progress").textContent !== text) $("progress").textContent = text;
    $("failed-note").textContent = counters.failed ? " · " + counters.failed + " could not be made" : "";
    const bar = $("bar");
    bar.setAttribute("aria-valuemax", String(counters.total));
    bar.setAttribute("aria-valuenow", String(counters.rendered));
    bar.setAttribute("aria-valuetext", text + " tickets ready");
    const pct = counters.total ? Math.min(100, (100 * counters.rendered) / counters.total) : 0;
    $("bar-fill").style.width = pct + "%";
    $("progress-heading").textContent = FINAL.has(shown) ? headingFor(shown) : "Preparing your tickets";
    showDownloadAll(shown);
  }

  function headingFor(shown) {
    return {
      completed: "Your tickets are ready",
      partially_failed: "Some tickets could not be made",
      failed: "Your tickets could not be made",
      cancelled: "This order was cancelled",
    }[shown];
  }

  function showDownloadAll(shown) {
    const box = $("download-all");
    const wanted = (shown === "completed" || shown === "partially_failed") && counters.rendered > 0;
    const parts = wanted ? Math.ceil(counters.total / partSize) : 0;
    if (box.childElementCount === parts) return;
    box.replaceChildren();
    for (let p = 0; p < parts; p++) {
      const a = document.createElement("a");
      a.className = "button";
      a.dataset.testid = "download-all";
      a.href = "/o/" + encodeURIComponent(orderId) + "/tickets.pdf" + (p ? "?part=" + p : "");
      a.setAttribute("download", "");
      if (parts === 1) {
        a.textContent = "Download all tickets (one PDF)";
      } else {
        const last = Math.min(counters.total, (p + 1) * partSize);
        a.textContent = "Download tickets " + (p * partSize + 1) + "–" + last + " (PDF)";
      }
      box.append(a);
    }
  }

  function buildRows(tickets) {
    const list = $("tickets");
    const frag = document.createDocumentFragment();
    tickets.forEach((t, n) => {
      const li = document.createElement("li");
      const who = document.createElement("span");
      who.className = "who";
      const num = document.createElement("span");
      num.className = "num";
      num.textContent = "#" + (n + 1);
      who.append(num, document.createTextNode(t.holder));
      const state = document.createElement("span");
      state.className = "state";
      li.append(who, state);
      frag.append(li);
      const row = { li, state: "", holder: t.holder, n };
      rows.set(t.id, row);
      setTicket(t.id, t.status);
    });
    list.replaceChildren(frag);
  }

  // A re-issued ticket's new holder: its row's name, and its links' labels drawn again.
  function setHolder(id, holder) {
    const row = rows.get(id);
    if (!row || !holder || row.holder === holder) return;
    row.holder = holder;
    row.li.firstChild.lastChild.textContent = holder;
    const state = row.state;
    row.state = "";
    if (state) setTicket(id, state);
  }

  function linkCount() {
    let n = 0;
    rows.forEach((r) => { if (r.state === "rendered") n++; });
    return n;
  }

  // A ticket's row: a download link once rendered; never back to waiting.
  function setTicket(id, state) {
    const row = rows.get(id);
    if (!row) return;
    if (state === "checked_in") state = "rendered";
    if (row.state === state || (row.state === "rendered" && state === "queued")) return;
    row.state = state;
    const slot = row.li.lastChild;
    if (state === "rendered") {
      const base = "/o/" + encodeURIComponent(orderId) + "/tickets/" + encodeURIComponent(id);
      const what = "ticket " + (row.n + 1) + " for " + row.holder;
      const links = document.createElement("span");
      links.className = "links";
      links.append(ticketLink("ticket-link", base + ".pdf", "Download PDF", "Download " + what + " (PDF)"));
      links.lastChild.setAttribute("download", id + ".pdf");
      if (wallets.apple) {
        links.append(ticketLink("wallet-apple", base + ".pkpass", "Add to Apple Wallet", "Add " + what + " to Apple Wallet"));
      }
      if (wallets.google) {
        // The api signs Google's link when it is followed, then sends the browser on to Google.
        links.append(ticketLink("wallet-google", base + "/google-wallet", "Save to Google Wallet",
          "Save " + what + " to Google Wallet"));
      }
      row.li.replaceChild(links, slot);
      return;
    }
    const span = document.createElement("span");
    span.className = "state" + (state === "failed" ? " failed" : "");
    span.textContent = { queued: "being prepared…", failed: "could not be made", cancelled: "cancelled" }[state] || state;
    row.li.replaceChild(span, slot);
  }

  function ticketLink(testid, href, text, label) {
    const a = document.createElement("a");
    a.dataset.testid = testid;
    a.href = href;
    a.textContent = text;
    a.setAttribute("aria-label", label);
    return a;
  }

  function cancelAll() {
    rows.forEach((_, id) => setTicket(id, "cancelled"));
  }

  // --- the order (HTTP) ------------------------------------------------------
  async function openSession() {
    if (!token) return;
    const r = await fetch("/o/" + encodeURIComponent(orderId) + "/session", {
      method: "POST", headers: authHeaders(), credentials: "same-origin",
    });
    if (r.status === 401) {
      token = null;
      try { sessionStorage.removeItem(linkKey); } catch (e) { /* ignore */ }
    }
  }

  async function readOrder() {
    const r = await fetch("/o/" + encodeURIComponent(orderId) + "/state", {
      headers: authHeaders(), credentials: "same-origin",
    });
    if (r.status === 401 || r.status === 404) {
      stopped = true;
      notice(r.status === 401
        ? "This link has expired or is incomplete. Open the link from your order confirmation again."
        : "We could not find this order.", true);
      $("status").textContent = "unavailable";
      return null;
    }
    if (!r.ok) throw new Error("order: HTTP " + r.status);
    return r.json();
  }

  function showOrder(o, first) {
    progressUrl = o.progress_url;
    partSize = o.part_size || partSize;
    if (first) {
      $("event-name").textContent = o.event_name;
      document.title = o.event_name + " · your tickets";
      const whenText = window.Ticketry.venueTime(o.starts_at, o.timezone, o.zone_abbr, {
        weekday: "long", year: "numeric", month: "long", day: "numeric",
      });
      $("event-when").textContent = whenText + " · " + o.venue;
      $("tier-name").textContent = o.tier_name;
      $("tier-line").hidden = false;
      wallets.apple = !!o.wallet_apple;
      wallets.google = !!o.wallet_google;
      buildRows(o.tickets);
    } else {
      o.tickets.forEach((t) => { setHolder(t.id, t.holder); setTicket(t.id, t.status); });
    }
    merge(o.total, o.rendered, o.failed);
    if (o.status === "cancelled") {
      status = "cancelled";
      cancelAll();
    } else if (FINAL.has(o.status)) {
      status = "completed";
    }
    showProgress();
  }

  function merge(total, rendered, failed) {
    // Counters only grow: a replayed message carries the counts of its time.
    counters.total = Math.max(counters.total, total || 0);
    counters.rendered = Math.max(counters.rendered, rendered || 0);
    counters.failed = Math.max(counters.failed, failed || 0);
  }

  // The links lag the counters (tickets rendered before this page looked):
  // read the order again until they agree.
  function scheduleRefresh(delayMs) {
    if (refreshTimer || stopped || status === "cancelled") return;
    if (linkCount() >= counters.rendered) return;
    if (refreshes > 60) return;
    refreshTimer = setTimeout(async () => {
      refreshTimer = null;
      refreshes++;
      try {
        const o = await readOrder();
        if (o) showOrder(o, false);
      } catch (e) { /* next time */ }
      scheduleRefresh(Math.min(5000, 500 + refreshes * 500));
    }, delayMs);
  }

  // --- progress (WebSocket) --------------------------------------------------
  function connect() {
    if (stopped || !token || !progressUrl || FINAL.has(status)) return;
    clearTimeout(retryTimer);
    const url = new URL(progressUrl);
    if (lastId) url.searchParams.set("after", lastId);
    resuming = Boolean(lastId);
    let ws;
    try {
      // The link goes as a subprotocol: never in a URL, so never in a log. With
      // "ticketry" offered too, the server answers "ticketry", not the token.
      ws = new WebSocket(url.toString(), ["ticketry", "bearer." + token]);
    } catch (e) {
      retry();
      return;
    }
    socket = ws;
    ws.onmessage = (ev) => {
      let msg;
      try { msg = JSON.parse(ev.data); } catch (e) { return; }
      retries = 0;
      onMessage(msg);
    };
    ws.onopen = () => notice("");
    ws.onclose = (ev) => {
      if (socket !== ws) return;
      socket = null;
      if (stopped || FINAL.has(status)) return;
      if (ev.code === 1000) { status = "cancelled"; cancelAll(); showProgress(); return; }
      if (ev.code === 4404) { stopped = true; notice("We could not find this order.", true); return; }
      if (ev.code === 4401) {
        // The link expired (or was refused): a new socket would be refused too.
        stopped = true;
        notice("This link has expired. Open the link from your order confirmation again.", true);
        return;
      }
      notice("Connection lost. Reconnecting…");
      retry();
    };
  }

  function retry() {
    if (stopped) return;
    clearTimeout(retryTimer);
    // Full jitter, doubling to 10 s: a crowd of pages does not come back at once.
    const cap = Math.min(10000, 500 * 2 ** Math.min(retries, 5));
    retries++;
    retryTimer = setTimeout(connect, 250 + Math.random() * cap);
  }

  function onMessage(msg) {
    if (msg.id) lastId = msg.id;
    merge(msg.total, msg.rendered, msg.failed);
    switch (msg.type) {
      case "snapshot":
        if (msg.status === "cancelled") { status = "cancelled"; cancelAll(); }
        else if (msg.status === "completed" || msg.completed) status = "completed";
        scheduleRefresh(0);
        break;
      case "ticket.rendered":
        setTicket(msg.ticket_id, "rendered");
        break;
      case "ticket.failed":
        setTicket(msg.ticket_id, "failed");
        break;
      case "ticket.reissued": // its holder (and PDF) changed: read the order again
        readOrder().then((o) => { if (o) showOrder(o, false); }).catch(() => { /* the next refresh */ });
        break;
      case "order.completed":
        status = "completed";
        scheduleRefresh(0);
        break;
      case "order.cancelled":
        status = "cancelled";
        cancelAll();
        break;
      default:
        break;
    }
    showProgress();
    if (!FINAL.has(status) || !socket) return;
    // A resumed socket's snapshot of a finished order comes before the replay of
    // what this page missed: keep reading until the replay's final message.
    if (msg.type === "snapshot" && resuming && status !== "cancelled") {
      replaying = true;
      clearTimeout(lingerTimer);
      lingerTimer = setTimeout(closeSocket, 15000);
      return;
    }
    if (replaying && msg.type !== "order.completed" && msg.type !== "order.cancelled") return;
    closeSocket();
  }

  function closeSocket() {
    clearTimeout(lingerTimer);
    replaying = false;
    if (!socket) return;
    const ws = socket;
    socket = null;
    ws.close(1000);
    if (status !== "cancelled") notice("");
    scheduleRefresh(0);
  }

  // Without a link in this tab (the page was opened again without it), the
  // cookie still reads the order: poll it until it is final.
  async function poll() {
    if (stopped || FINAL.has(status)) return;
    try {
      const o = await readOrder();
      if (o) showOrder(o, false);
    } catch (e) { /* next time */ }
    if (!stopped && !FINAL.has(status)) setTimeout(poll, 3000);
  }

  window.addEventListener("online", () => {
    if (!socket && !stopped && !FINAL.has(status)) { retries = 0; connect(); }
  });

  async function start() {
    if (!/^or_[0-9a-f]{20}$/.test(orderId)) {
      notice("This is not an order's page.", true);
      return;
    }
    try {
      await openSession();
      const o = await readOrder();
      if (!o) return;
      showOrder(o, true);
      if (FINAL.has(status)) { scheduleRefresh(0); return; }
      if (token) connect();
      else setTimeout(poll, 3000);
    } catch (e) {
      notice("Could not load your order; retrying…", true);
      setTimeout(start, 3000);
    }
  }

  start();
})();
