"""What the routes share to answer a request, above the dependencies (``ticketry_api.deps``): who
may read an order or an event (``order_links``, ``orders_read``, ``events_read``) and what a request
for PDFs or wallet passes answers (``pdf_answers``, ``wallet_answers``)."""
