"""Adapters to AWS: error codes, retries, tables, Kinesis listing, the GetRecords parser.

Plain functions taking boto3 clients. Nothing here knows about shards being owned or
records being delivered.
"""
