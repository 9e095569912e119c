"""The api's store code shaped by FerretDB v1's limits (see ``ledger_core`` and
``batches`` for the pure rules, unit-tested without a server)."""
