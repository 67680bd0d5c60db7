"""Writing records to a Kinesis stream: PutRecords in full batches, retried, optionally KPL-aggregated."""
