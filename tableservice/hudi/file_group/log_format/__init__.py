"""Hudi log files: reading, decoding and writing log blocks.

Reading
- `iter_log_blocks(storage, location, *, table=None, eager_content_limit=1 MiB)` yields `LogBlock` and
  `CorruptBlock` in file order, streaming block by block (data content over the limit is read on demand;
  delete block content is always kept).
- `decode_data_block(block, storage=None, *, table=None) -> pa.Table` for AVRO_DATA / CDC_DATA / PARQUET_DATA.
- `decode_delete_block(block, storage=None, *, table=None) -> pa.Table` with columns record_key,
  partition_path, ordering_value, ordering_value_kind (see `deletes` for the ordering value types).
- `read_block_content(block, storage) -> bytes`.
- `iter_log_records(storage, location, *, table=None)` yields (is_delete, rows) per data and delete block.

Writing
- `encode_avro_data_block(table, avro_schema, header)`, `encode_parquet_data_block(table, header,
  compression="gzip", avro_schema=None)`, `encode_delete_block(records, header)`, `encode_command_block(header)`
  return the bytes of one block; `rollback_header(instant, target)` builds a rollback command header.
- `append_log_blocks(storage, location, blocks, *, create_only=False) -> AppendResult` appends (local) or
  creates the file; `can_append(storage, location)` says whether an existing file can be appended to.

Model: `BlockType`, `HeaderKey`, `LogBlock`, `CorruptBlock`, `DeleteRecord`.
"""

from tableservice.hudi.file_group.log_format.blocks import BlockType, CorruptBlock, HeaderKey, LogBlock
from tableservice.hudi.file_group.log_format.deletes import DeleteRecord
from tableservice.hudi.file_group.log_format.reader import (
    decode_data_block,
    decode_delete_block,
    iter_log_blocks,
    iter_log_records,
    read_block_content,
)
from tableservice.hudi.file_group.log_format.writer import (
    AppendResult,
    append_log_blocks,
    can_append,
    encode_avro_data_block,
    encode_command_block,
    encode_delete_block,
    encode_parquet_data_block,
    rollback_header,
)

__all__ = [
    "AppendResult",
    "BlockType",
    "CorruptBlock",
    "DeleteRecord",
    "HeaderKey",
    "LogBlock",
    "append_log_blocks",
    "can_append",
    "decode_data_block",
    "decode_delete_block",
    "encode_avro_data_block",
    "encode_command_block",
    "encode_delete_block",
    "encode_parquet_data_block",
    "iter_log_blocks",
    "iter_log_records",
    "read_block_content",
    "rollback_header",
]
