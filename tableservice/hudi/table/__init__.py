"""A table: hoodie.properties, its schema, the file-system view, snapshots and whole-table reads."""
