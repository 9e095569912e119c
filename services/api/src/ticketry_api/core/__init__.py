"""The api's domain core: order rules, pricing, names, cancel and check-in
decisions, cursors, and :class:`~ticketry_api.core.problem.Problem`, the
domain's refusal. Plain logic on plain data: nothing here imports FastAPI,
pymongo or redis, or any module of the api outside this package
(``tests/unit/test_layers.py``)."""
