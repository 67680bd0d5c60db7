"""Coordination in DynamoDB: membership and leadership, the shard cache, assignment, and the
lifecycle of each owned shard (its lease, its reader, its commits)."""
