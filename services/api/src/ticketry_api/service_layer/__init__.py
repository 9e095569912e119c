"""The core's rules carried out: each use case loads through the store port (``ticketry_api.store``)
and Redis, asks ``ticketry_api.core`` what to do and saves the outcome — orders, cancel, check-ins,
a door's ticket list, re-issue and scanner devices."""
