"""Clean planning: policy, the retention rules, and the plan."""
