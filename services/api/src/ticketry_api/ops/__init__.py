"""What operators see and do, from Redis alone: the streams, renderers and
scaler decisions (``status``), the dead letters (``render_dead`` and
``webhooks.deadletters``) with every re-drive and delete written to the audit
log (``audit``), and the one shared poll the console's live feed reads (``feed``).

``ticketryctl`` calls these in-process and the console's routes
(``routes/ops.py``) over HTTP: one implementation of each action.
"""
