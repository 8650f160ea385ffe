"""Planning the metadata table's own services: its policy (Hudi's `hoodie.metadata.*` keys)."""
