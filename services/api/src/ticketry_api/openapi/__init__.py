"""The OpenAPI document the api serves: built from the routes (``doc``), with each route's
problem answers (``problems``), examples (``examples``) and links between operations (``links``)."""
