"""The api's pure-ASGI middlewares, outermost first as ``main.create_app``
stacks them: ``metrics`` (every answer counted), ``bodies`` (size cap, read
deadline, a bound per client), ``security`` (headers, opt-in CORS),
``shedding`` (the order gate, then a bounded slot or 503 for
``POST /v1/orders``), ``budget`` (a request's patience with Redis)."""
