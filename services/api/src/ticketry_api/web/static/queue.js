// The buyer's page of a waiting-room place (/q/<queue id>#t=<place link>).
//
// The link comes in the URL's fragment (never sent to a server), is cleared
// from the address bar at once and kept in this tab's session storage; the
// shop may add r=<its checkout URL> to the fragment, shown as a link once the
// buyer's turn has come, if it is on one of the shop origins the api names in
// the page (TICKETRY_SHOP_ORIGINS). The page reads the place, then follows its queue
// socket: a position when it moves, then admitted or closed. Sold out is not
// the end: the socket stays open, and tickets that come back (a cancel) move
// the place on again. When the socket drops it reconnects (each socket starts
// with the place as it is).
"use strict";

(function () {
  const queueId = decodeURIComponent(location.pathname.split("/")[2] || "");
  const linkKey = "ticketry.queue-link." + queueId;
  const backKey = "ticketry.queue-return." + queueId;
  const $ = (id) => document.getElementById(id);
  const FINAL = new Set(["admitted", "closed"]);
  const TEXT = {
    early: ["You are early", "early: your place is drawn when the sale opens"],
    waiting: ["You are in line", "waiting"],
    paused: ["You are in line", "paused"],
    admitted: ["It's your turn", "admitted"],
    sold_out: ["Sold out", "sold out"],
    closed: ["The waiting room is closed", "closed"],
  };

  let token = null;
  let back = null;
  let progressUrl = null;
  let state = "loading";
  let socket = null;
  let retries = 0;
  let stopped = false;

  // --- the link (and the shop's return address) -----------------------------
  const fragment = new URLSearchParams(location.hash.slice(1));
  if (fragment.get("t")) {
    token = fragment.get("t");
    back = safeReturn(fragment.get("r"));
    try {
      sessionStorage.setItem(linkKey, token);
      if (back) sessionStorage.setItem(backKey, back);
    } catch (e) { /* private mode: keep them in memory */ }
    history.replaceState(null, "", location.pathname + location.search);
  } else {
    try {
      token = sessionStorage.getItem(linkKey);
      back = sessionStorage.getItem(backKey);
    } catch (e) { token = null; }
    back = safeReturn(back);
  }

  function safeReturn(raw) {
    // Only back to a shop the api names: anyone can write r= into a link, and
    // this page must not send a buyer at their turn to another "checkout".
    if (!raw) return null;
    const meta = document.querySelector('meta[name="ticketry-shop-origins"]');
    const shops = new Set(((meta && meta.content) || "").split(/\s+/).filter(Boolean));
    try {
      const u = new URL(raw);
      return (u.protocol === "https:" || u.protocol === "http:") && shops.has(u.origin) ? u.toString() : null;
    } catch (e) { return null; }
  }

  function notice(text, isError) {
    const el = $("notice");
    el.textContent = text || "";
    el.classList.toggle("error", Boolean(isError));
  }

  function clock(iso) {
    return new Date(iso).toLocaleTimeString([], { hour: "2-digit", minute: "2-digit" });
  }

  function waitText(seconds) {
    if (seconds == null) return "";
    if (seconds < 60) return "Estimated wait: under a minute";
    const minutes = Math.round(seconds / 60);
    return "Estimated wait: about " + minutes + (minutes === 1 ? " minute" : " minutes");
  }

  // --- rendering -------------------------------------------------------------
  function show(next, place) {
    if (state === "sold_out" && next !== "sold_out") notice("");
    state = next;
    const [heading, label] = TEXT[next];
    $("queue-heading").textContent = heading;
    const el = $("status");
    el.textContent = label;
    el.dataset.status = next;
    const waiting = !FINAL.has(next) && next !== "sold_out";
    $("position-line").hidden = !waiting;
    if (waiting) {
      $("position").textContent = place.position == null ? "drawn when the sale opens" : String(place.position);
      $("wait").textContent = next === "paused" ? "Admission is paused for a moment; your place is kept." : waitText(place.eta_s);
    } else {
      $("wait").textContent = "";
    }
    const nextEl = $("next");
    nextEl.hidden = next !== "admitted";
    if (next === "admitted") {
      nextEl.replaceChildren();
      const until = place.expires_at ? " before " + clock(place.expires_at) : "";
      if (back) {
        const a = document.createElement("a");
        a.className = "button";
        a.dataset.testid = "queue-continue";
        a.href = back;
        a.textContent = "Continue to checkout" + until;
        nextEl.append(a);
      } else {
        nextEl.textContent = "Go back to the shop to complete your order" + until + ".";
      }
    }
    if (next === "sold_out") notice("Every ticket has been sold. Keep this page open: if tickets come back, your place moves on here.");
    if (next === "closed") notice("The organiser has closed this waiting room.");
  }

  function stateOf(place) {
    if (place.admitted) return "admitted";
    if (place.closed) return "closed";
    if (place.sold_out) return "sold_out";
    if (place.paused) return "paused";
    return place.position == null ? "early" : "waiting";
  }

  // --- the place, then its socket ---------------------------------------------
  async function start() {
    if (!token) {
      notice("This page needs the link you were given when you joined the line.", true);
      return;
    }
    let r;
    try {
      r = await fetch("/q/" + encodeURIComponent(queueId) + "/state", { headers: { Authorization: "Bearer " + token } });
    } catch (e) {
      notice("No connection; trying again…", true);
      setTimeout(start, 3000);
      return;
    }
    if (r.status === 401) { notice("This link has expired. Join the line again from the shop.", true); return; }
    if (r.status === 404) { notice("We could not find this place in line.", true); return; }
    if (!r.ok) { notice("Something went wrong; trying again…", true); setTimeout(start, 3000); return; }
    const page = await r.json();
    $("event-name").textContent = page.event_name;
    const when = window.Ticketry.venueTime(page.starts_at, page.timezone, page.zone_abbr, { dateStyle: "medium" });
    $("event-when").textContent = page.venue + " · " + when;
    progressUrl = page.place.progress_url;
    show(stateOf(page.place), page.place);
    if (!FINAL.has(state)) connect();
  }

  function connect() {
    if (stopped || FINAL.has(state)) return;
    let ws;
    try {
      // The link goes as a subprotocol: never in a URL, so never in a log.
      ws = new WebSocket(progressUrl, ["ticketry", "bearer." + token]);
    } catch (e) {
      retry();
      return;
    }
    socket = ws;
    ws.onopen = () => notice("");
    ws.onmessage = (ev) => {
      let msg;
      try { msg = JSON.parse(ev.data); } catch (e) { return; }
      retries = 0;
      if (msg.type === "queue.position") show(msg.paused ? "paused" : (msg.position == null ? "early" : "waiting"), msg);
      else if (msg.type === "queue.admitted") show("admitted", msg);
      else if (msg.type === "queue.sold_out") show("sold_out", msg);
      else if (msg.type === "queue.closed") show("closed", msg);
    };
    ws.onclose = (ev) => {
      if (socket !== ws) return;
      socket = null;
      if (FINAL.has(state)) return;
      if (ev.code === 4401 || ev.code === 4404) {
        stopped = true;
        notice(ev.code === 4401 ? "This link has expired. Join the line again from the shop." : "We could not find this place in line.", true);
        return;
      }
      retry();
    };
  }

  function retry() {
    retries += 1;
    notice("Reconnecting… your place is kept.");
    setTimeout(connect, 250 + Math.random() * Math.min(10000, 500 * 2 ** retries));
  }

  start();
})();
