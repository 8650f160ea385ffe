"""Executing table-service actions in the format layer, and the one commit path every action ends in."""
