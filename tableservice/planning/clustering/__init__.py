"""Clustering planning: policy, trigger, grouping, plan, and validation of plans from elsewhere."""
