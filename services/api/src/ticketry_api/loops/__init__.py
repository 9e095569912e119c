"""The lifespan's background loops of their own: the projector (ticket messages into the read
models) and the outbox sweep (orders left in flight finished or given back)."""
