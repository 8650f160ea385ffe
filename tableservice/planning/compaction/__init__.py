"""Compaction planning: policy, trigger, strategies, plan, and validation of plans from elsewhere."""
