"""The demo and the local tooling of a checkout (not part of the installed package).

``python -m demo`` (``make demo``) runs the demo on an embedded moto server; ``servers`` starts
local AWS-compatible servers on 127.0.0.1; ``aggregation`` writes KPL aggregates with awslabs'
aws-kinesis-agg (for the tests and the benchmarks). The demo's records are written by the package's
own producer, :mod:`kinsumer.cli.produce` (``kinsumer produce``).
"""
