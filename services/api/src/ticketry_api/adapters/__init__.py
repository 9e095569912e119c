"""The api's small adapters beside the store port: rate limits, replica waits and stream trimming
(Redis), render requests (the render stream), read-model answers, and PDF retention (storage)."""
