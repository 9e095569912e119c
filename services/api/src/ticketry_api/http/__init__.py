"""The api's HTTP vocabulary, below everything that answers a request: problem+json for every
refusal (``errors``: a domain ``Problem``, a dependency down, FastAPI's own refusals) and the
request and response models (``schemas``)."""
