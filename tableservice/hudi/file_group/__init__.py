"""File groups and their slices' files: file names, base files (Parquet), bloom filters, log format, merged reads."""
