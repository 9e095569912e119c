// Shared by the buyer's pages (loaded before each page's own script).
"use strict";

window.Ticketry = Object.freeze({
  // An instant in the venue's time zone as the ticket prints it: the date in
  // the reader's language, then the time on a 24-hour clock and the zone's
  // abbreviation the api sends ("…, 20:00 CEST"; a browser's own short name
  // is often "GMT+2"). The ISO text itself if the browser lacks the zone.
  venueTime(iso, zone, abbr, dateOptions) {
    const when = new Date(iso);
    try {
      const date = new Intl.DateTimeFormat(undefined, { ...dateOptions, timeZone: zone }).format(when);
      const time = new Intl.DateTimeFormat(undefined, {
        hour: "2-digit", minute: "2-digit", hourCycle: "h23", timeZone: zone,
      }).format(when);
      return date + ", " + time + " " + abbr;
    } catch (e) {
      return iso;
    }
  },
});
