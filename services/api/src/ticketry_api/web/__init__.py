"""The pages people use, served by the api: the buyer's order page at an
order's ``status_page_url`` (``/o/<order id>``) and the door scanner at
``/scan``. Plain HTML, CSS and JavaScript from ``static/`` (no build step);
the one library, jsQR, is vendored under ``static/vendor/`` with its licence.

(The lists' cursors are ``ticketry_api.core.cursors``.)
"""
