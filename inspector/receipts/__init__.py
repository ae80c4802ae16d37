"""The receipts JSON document: build, validate against ``assets/receipts.schema.json``, write, load."""

from inspector.receipts.document import (
    SCHEMA_ID,
    SCHEMA_VERSION,
    ReceiptsFileError,
    build_document,
    load_document,
    validate_document,
    write_document,
)

__all__ = [
    "SCHEMA_ID", "SCHEMA_VERSION", "ReceiptsFileError", "build_document",
    "load_document", "validate_document", "write_document",
]
