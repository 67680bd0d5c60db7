"""Reading shards: start positions, the :class:`~.reader.ShardReader` seam and its polling
implementation, and the consumable frontier (parents before children)."""
