// The operator's console (/ops#token=<admin JWT>). The token is taken from the
// fragment, kept in this tab's sessionStorage, cleared from the URL and sent
// only in the Authorization header. Everything shown is set as text: a reason
// or a name is never markup.
"use strict";

(() => {
  const KEY = "ticketry.ops.token";
  const WINDOW_S = 15 * 60; // the throughput chart's span
  const $ = (id) => document.getElementById(id);

  const fragment = new URLSearchParams(location.hash.slice(1));
  if (fragment.get("token")) sessionStorage.setItem(KEY, fragment.get("token"));
  if (location.hash) history.replaceState(null, "", location.pathname + location.search);
  const token = sessionStorage.getItem(KEY);

  function el(tag, text, attrs) {
    const e = document.createElement(tag);
    if (text !== undefined && text !== null) e.textContent = String(text);
    for (const [k, v] of Object.entries(attrs || {})) e.setAttribute(k, String(v));
    return e;
  }
  function row(cells, attrs) {
    const tr = el("tr", null, attrs);
    cells.forEach((c) => tr.append(el("td", c)));
    return tr;
  }
  function notice(text) { $("notice").textContent = text || ""; }
  function live(state, text) { $("live").dataset.state = state; $("live").textContent = text; }
  const secs = (ms) => (ms === null || ms === undefined ? "–" : (ms / 1000).toFixed(1) + " s");

  async function api(path, options) {
    const r = await fetch(path, {
      ...(options || {}),
      headers: { Authorization: "Bearer " + token, "Content-Type": "application/json" },
      cache: "no-store",
    });
    if (r.status === 401) notice("The admin token is invalid or expired: open /ops#token=<admin token> again.");
    if (r.status === 403) notice("This token is not an admin's: the console is for admins only.");
    return r;
  }

  // --- streams, renderers, scaler ---------------------------------------------------
  function showStreams(s) {
    const body = $("streams");
    const rows = [];
    for (const [name, info] of Object.entries(s.streams)) {
      const groups = Object.entries(info.groups);
      if (!groups.length) {
        rows.push(row([name, "", info.exists ? info.length : "–", "", "", "", ""],
          { "data-testid": "ops-stream", "data-stream": name, "data-group": "", "data-lag": 0 }));
      }
      for (const [group, g] of groups) {
        const consumers = (g.consumers_detail || []).map((c) => c.name + " (" + secs(c.idle_ms) + ")").join(", ");
        rows.push(row([
          name, group, info.length, g.lag === null ? "?" : g.lag + (g.behind ? " — behind" : ""), g.pending,
          secs(g.oldest_pending_ms), consumers || g.consumers,
        ], {
          "data-testid": "ops-stream", "data-stream": name, "data-group": group,
          "data-lag": g.lag === null ? "" : g.lag, "data-behind": g.behind ? "true" : "false",
        }));
      }
    }
    body.replaceChildren(...rows);
  }

  function showRenderers(s) {
    const ttl = s.heartbeat_ttl_s || 5;
    $("renderers").replaceChildren(...s.renderers.map((r) => {
      const stale = r.beat_age_s > ttl / 2;
      return row([
        r.consumer, r.host + " (pid " + r.pid + ")",
        stale ? "heartbeat stopped" : r.busy > 0.05 ? "busy " + Math.round(r.busy * 100) + " %" : "idle",
        (r.recent || 0).toFixed(1), r.rate.toFixed(1), r.rendered, r.rss ? (r.rss / 1048576).toFixed(0) + " MiB" : "–",
        r.beat_age_s.toFixed(1) + " s ago",
      ], { "data-testid": "ops-renderer", "data-consumer": r.consumer, "data-stale": stale ? "true" : "false",
        "data-rss": r.rss || 0, "data-recent": r.recent || 0 });
    }));
    $("capacity").textContent = s.renderers.length + " renderer(s), capacity " + (s.capacity || 0).toFixed(1) +
      " tickets/s; render backlog: lag " + s.lag + ", pending " + s.pending;
    const sc = s.scaler;
    const desired = sc.desired === null || sc.desired === undefined ? "" : String(sc.desired);
    $("scaler").textContent = (sc.leader ? "leader " + sc.leader + " (token " + sc.token + ")" : "no scaler leader") +
      "; renderers desired " + (desired || "–") + ", live " + s.renderers.length;
    $("scaler").dataset.desired = desired;
    $("decisions").replaceChildren(...(s.scaler_decisions || []).map((d) => el("li",
      new Date(Number(d.ts) * 1000).toLocaleTimeString() + ": " + d.from + " → " + d.to + " (" + d.reason +
      "; lag " + d.lag + ", pending " + d.pending + ", live " + d.live + ")",
      { "data-testid": "ops-decision" })));
  }

  // --- throughput chart (kept here, from the feed's rates) ---------------------------
  const points = [[], [], [], [], []]; // unix seconds, tickets rendered/s, orders accepted/s, first ticket p50 and p99 (ms)
  let chart = null;
  let peak = 0; // the most tickets rendered per second seen
  let ordersPeak = 0; // the most orders accepted per second seen
  function chartWidth() { return Math.max($("chart").clientWidth, 280); }
  // One point of the chart (a kept one, or the feed's), and the peaks it may raise.
  function addPoint(at, rendered, accepted, p50, p99) {
    [at, rendered, accepted, p50, p99].forEach((v, i) => points[i].push(v));
    peak = Math.max(peak, rendered);
    ordersPeak = Math.max(ordersPeak, accepted || 0);
    Object.assign($("chart").dataset, { peak: peak, ordersPeak: ordersPeak });
  }
  function showThroughput(s) {
    const now = Date.now() / 1000;
    const ft = s.first_ticket || {};
    const p50 = ft.p50_ms ?? null, p99 = ft.p99_ms ?? null; // none: no order in the window
    addPoint(now, s.rates.tickets_rendered, s.rates.orders_accepted, p50, p99);
    const lat = $("latency");
    lat.dataset.p50 = p50 ?? "";
    lat.dataset.p99 = p99 ?? "";
    lat.textContent = ft.orders
      ? "first ticket after the order (last 15 min, " + ft.orders + " orders): p50 " + secs(ft.p50_ms) +
        ", p99 " + secs(ft.p99_ms)
      : "first ticket after the order: no order in the last 15 minutes";
    while (points[0].length && points[0][0] < now - WINDOW_S) points.forEach((p) => p.shift());
    $("chart").dataset.points = points[0].length;
    $("chart").dataset.last = s.rates.tickets_rendered;
    if (typeof uPlot === "undefined") return;
    if (chart === null) {
      chart = new uPlot({
        width: chartWidth(), height: 220,
        series: [{}, { label: "tickets rendered/s", stroke: "#0a6b2c", width: 2 },
          { label: "orders accepted/s", stroke: "#0b57d0", width: 2 },
          { label: "first ticket p50 (ms)", stroke: "#8a5a00", width: 1, scale: "ms" },
          { label: "first ticket p99 (ms)", stroke: "#b3261e", width: 1, dash: [4, 4], scale: "ms" }],
        axes: [{}, { label: "per second" }, { scale: "ms", side: 1, label: "ms", grid: { show: false } }],
      }, points, $("chart"));
      window.addEventListener("resize", () => chart.setSize({ width: chartWidth(), height: 220 }));
    } else {
      chart.setData(points);
    }
  }

  // --- sales: sold / capacity per event and tier, orders by status, waiting rooms --------
  const STATUSES = ["processing", "completed", "partially_failed", "failed", "cancelled"];
  let salesSeen = null;
  function roomAction(sale, action, question) {
    const b = el("button", action[0].toUpperCase() + action.slice(1), {
      type: "button", class: action === "close" ? "danger" : "secondary", "data-testid": "ops-room-" + action,
    });
    b.addEventListener("click", () => act("POST",
      "/v1/events/" + encodeURIComponent(sale.event_id) + "/queue/" + action, null, question));
    return b;
  }
  function saleItem(sale) {
    const li = el("li", null, {
      "data-testid": "ops-sale", "data-event": sale.event_id, "data-sold": sale.sold, "data-capacity": sale.capacity,
    });
    li.append(el("div", sale.name, { class: "name" }));
    li.append(el("div", sale.event_id + " · sold " + sale.sold + " / " + sale.capacity, { class: "muted small", "data-testid": "ops-sale-sold" }));
    const table = el("table");
    const heads = el("tr");
    ["tier", "sold / capacity"].forEach((h) => heads.append(el("th", h)));
    table.append(el("thead"));
    table.tHead.append(heads);
    const body = el("tbody");
    sale.tiers.forEach((t) => body.append(row([t.name + " (" + t.id + ")", t.sold + " / " + t.capacity],
      { "data-testid": "ops-tier", "data-tier": t.id, "data-sold": t.sold, "data-capacity": t.capacity })));
    table.append(body);
    const wrap = el("div", null, { class: "scroll" });
    wrap.append(table);
    li.append(wrap);
    li.append(el("div", "orders: " + STATUSES.map((k) => k.replace("_", " ") + " " + (sale.orders[k] || 0)).join(" · "),
      { class: "small", "data-testid": "ops-orders", "data-completed": sale.orders.completed || 0 }));
    const r = sale.room;
    if (r) {
      const state = r.closed ? "closed" : r.paused ? "paused" : r.sold_out ? "sold out" : "admitting";
      li.append(el("div", "waiting room: " + state + " · waiting " + r.waiting + " · admitted " + r.admitted +
        " · " + r.rate.toFixed(1) + " admitted/s", {
        class: "room small", "data-testid": "ops-room", "data-paused": r.paused ? "true" : "false",
        "data-closed": r.closed ? "true" : "false", "data-waiting": r.waiting,
      }));
      if (!r.closed) {
        const actions = el("div", null, { class: "actions" });
        actions.append(r.paused
          ? roomAction(sale, "resume", "Resume admission to the waiting room of " + sale.name + "?")
          : roomAction(sale, "pause", "Pause admission to the waiting room of " + sale.name + "?"));
        actions.append(roomAction(sale, "close",
          "Close the waiting room of " + sale.name + " for good? Nobody joins or is admitted any more; it cannot reopen."));
        li.append(actions);
      }
    }
    return li;
  }
  function showSales(s) {
    if (s.sales === null || s.sales === undefined) {
      $("sales-note").textContent = "Sales could not be read from the store; retrying.";
      return;
    }
    const seen = JSON.stringify(s.sales);
    if (seen === salesSeen) return; // unchanged: leave the buttons where they are
    salesSeen = seen;
    $("sales-note").textContent = s.sales.length
      ? "Events with waiting rooms and those with the newest ticket events."
      : "No waiting room and no recent ticket event.";
    $("sales").replaceChildren(...s.sales.map(saleItem));
  }

  // --- dead letters and the audit log ------------------------------------------------
  async function act(method, path, body, question) {
    if (!window.confirm(question)) return;
    const r = await api(path, { method, body: body ? JSON.stringify(body) : undefined });
    if (!r.ok) {
      const p = await r.json().catch(() => ({}));
      notice((p.title || "failed") + (p.detail ? ": " + p.detail : ""));
    } else {
      notice("");
    }
    await loadDead();
  }

  function deadItem(kind, d) {
    const li = el("li", null, { "data-testid": "ops-deadletter", "data-id": d.id, "data-kind": kind });
    const attempts = d.history ? d.history.length : d.attempts;
    li.append(el("div", kind + " · " + d.id + " · " + (d.at || ""), { class: "muted small" }));
    li.append(el("div", d.reason, { class: "reason", "data-testid": "ops-reason" }));
    li.append(el("div", (d.order_id ? "order " + d.order_id : "") + (d.ticket_id ? " · ticket " + d.ticket_id : "") +
      (attempts !== undefined ? " · attempts " + attempts : "") + (d.redrivable ? "" : " · cannot be re-driven")));
    const detail = el("pre", null, { hidden: "" });
    const actions = el("div", null, { class: "actions" });
    const show = el("button", "Show", { type: "button", class: "secondary", "data-testid": "ops-show" });
    show.addEventListener("click", async () => {
      if (!detail.hidden) { detail.hidden = true; return; }
      const r = await api("/v1/ops/dead-letters/" + kind + "/" + encodeURIComponent(d.id));
      detail.textContent = r.ok ? JSON.stringify(await r.json(), null, 2) : "gone (re-driven or deleted)";
      detail.hidden = false;
    });
    actions.append(show);
    if (d.redrivable) {
      const redrive = el("button", "Redrive", { type: "button", "data-testid": "ops-redrive" });
      redrive.addEventListener("click", () => act("POST",
        "/v1/ops/dead-letters/" + kind + "/" + encodeURIComponent(d.id) + "/redrive", null,
        "Re-drive dead letter " + d.id + "?"));
      const all = el("button", "Redrive all of this reason", { type: "button", class: "secondary", "data-testid": "ops-redrive-reason" });
      all.addEventListener("click", () => act("POST", "/v1/ops/dead-letters/" + kind + "/redrive-reason",
        { reason: d.reason }, "Re-drive every " + kind + " dead letter with this reason?\n\n" + d.reason));
      actions.append(redrive, all);
    }
    const del = el("button", "Delete", { type: "button", class: "danger", "data-testid": "ops-delete" });
    del.addEventListener("click", () => act("DELETE", "/v1/ops/dead-letters/" + kind + "/" + encodeURIComponent(d.id),
      null, "Delete dead letter " + d.id + " for good?"));
    actions.append(del);
    li.append(actions, detail);
    return li;
  }

  async function loadDead() {
    const [dr, ar] = await Promise.all([api("/v1/ops/dead-letters"), api("/v1/ops/audit")]);
    if (dr.ok) {
      const dead = await dr.json();
      const items = [...dead.render.map((d) => deadItem("render", d)), ...dead.webhooks.map((d) => deadItem("webhooks", d))];
      $("dead").replaceChildren(...items);
      $("dead-count").textContent = dead.render.length + " render, " + dead.webhooks.length + " webhook dead letter(s)";
    }
    if (ar.ok) {
      $("audit").replaceChildren(...(await ar.json()).map((a) => el("li",
        new Date(a.at).toLocaleString() + " · " + a.who + " · " + a.action + " " + a.kind + " " + a.target + " → " +
        Object.values(a.outcome).join("; "), { "data-testid": "ops-audit", "data-who": a.who, "data-action": a.action })));
    }
  }

  // --- the live feed (fetch, not EventSource: the token goes in a header) --------------
  let deadSeen = null;
  function onSnapshot(s) {
    if (s.error) { live("lost", "stale"); notice(s.error); return; }
    live("live", "live");
    $("live").dataset.snapshots = Number($("live").dataset.snapshots || 0) + 1;
    const count = JSON.stringify([s.dead_letters, s.newest]);
    if (count !== deadSeen) { deadSeen = count; loadDead(); }
    // One panel that cannot draw a snapshot leaves the others (and the feed) going.
    for (const show of [showStreams, showRenderers, showThroughput, showSales]) {
      try { show(s); } catch (e) { console.error("ops: " + show.name + ": " + e); }
    }
  }

  async function follow() {
    for (;;) {
      try {
        const r = await api("/v1/ops/feed");
        if (r.status === 401 || r.status === 403) { live("lost", "no access"); return; }
        if (r.ok && r.body) {
          const reader = r.body.pipeThrough(new TextDecoderStream()).getReader();
          let buf = "";
          for (;;) {
            const { value, done } = await reader.read();
            if (done) break;
            buf += value;
            let end;
            while ((end = buf.indexOf("\n\n")) >= 0) {
              const frame = buf.slice(0, end);
              buf = buf.slice(end + 2);
              const data = frame.split("\n").filter((l) => l.startsWith("data: ")).map((l) => l.slice(6)).join("\n");
              if (data) onSnapshot(JSON.parse(data));
            }
          }
        }
      } catch (e) { /* the connection dropped: say so, then reconnect */ }
      live("lost", "reconnecting…");
      await new Promise((ok) => setTimeout(ok, 2000));
    }
  }

  // The last 15 minutes as the apis kept them (GET /v1/ops/status's throughput),
  // so a console opened mid-sale draws them at once; the feed's points follow.
  async function seedThroughput() {
    try {
      const r = await api("/v1/ops/status");
      if (!r.ok) return;
      const kept = (await r.json()).throughput || [];
      kept.forEach((p) => addPoint(p.at, p.tickets_rendered, p.orders_accepted, null, null));
      $("chart").dataset.seeded = kept.length;
    } catch (e) { /* live points only */ }
  }

  if (!token) {
    live("lost", "no token");
    notice("Open this page as /ops#token=<admin token>.");
    return;
  }
  seedThroughput().finally(follow);
})();
