"""The metadata table: HFile, records, keys, reader and writer."""
