"""Dead letters beyond the two first sinks: the envelope and its parser (:mod:`.envelope`), the S3 sink and its
keys (:mod:`.s3`), and reading dead letters back from any sink (:mod:`.reading`, for ``kinsumer
dead-letters``). Users import the sinks from :mod:`kinsumer.dead_letter`."""

__all__: list[str] = []
