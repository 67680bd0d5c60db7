"""Handling records with a handler: retries, dead letters, and the crash-loop guard (``Kinsumer.process``)."""
