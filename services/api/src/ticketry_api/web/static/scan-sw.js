// The door scanner's service worker (/scan-sw.js, scope /scan): the page and the
// files it runs on kept in the browser's cache, so a phone restarted where there
// is no network (or the api does not answer) still opens the scanner; its
// sign-in, queue and kept tickets are in IndexedDB already.
// Network first: whenever the api answers, the page is the api's current one
// (and the cache is refreshed with it); the cache answers only when it does not.
// The api's routes (/v1/...) never pass through here.
"use strict";

const CACHE = "ticketry-scan-shell-v1";
const SHELL = [
  "/scan",
  "/assets/common.css",
  "/assets/scan.css",
  "/assets/scan.js",
  "/assets/vendor/jsqr/jsQR.js",
  "/assets/vendor/noble-ed25519/index.js",
];
const NETWORK_MS = 5000; // an api that does not answer by then: the kept copy is shown

self.addEventListener("install", (ev) => {
  ev.waitUntil(caches.open(CACHE).then((cache) => cache.addAll(SHELL)).then(() => self.skipWaiting()));
});

self.addEventListener("activate", (ev) => {
  ev.waitUntil(
    caches.keys()
      .then((names) => Promise.all(names.filter((n) => n.startsWith("ticketry-scan-shell-") && n !== CACHE).map((n) => caches.delete(n))))
      .then(() => self.clients.claim()),
  );
});

async function networkFirst(request, key) {
  const abort = new AbortController();
  const timer = setTimeout(() => abort.abort(), NETWORK_MS);
  try {
    const response = await fetch(request, { signal: abort.signal });
    if (response.ok) {
      const copy = response.clone();
      caches.open(CACHE).then((cache) => cache.put(key, copy)).catch(() => {});
    }
    return response;
  } catch (e) {
    const kept = await caches.match(key, { cacheName: CACHE });
    return kept || Response.error();
  } finally {
    clearTimeout(timer);
  }
}

self.addEventListener("fetch", (ev) => {
  const request = ev.request;
  if (request.method !== "GET") return;
  const url = new URL(request.url);
  if (url.origin !== self.location.origin || !SHELL.includes(url.pathname)) return;
  ev.respondWith(networkFirst(request, url.pathname));
});
