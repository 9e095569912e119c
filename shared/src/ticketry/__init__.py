"""Ticketry shared library: settings, stream names, events, documents, auth and codes."""

__version__ = "0.1.0"
