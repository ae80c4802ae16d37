"""The receipts JSON document (built by ``inspector.session.document``): validate against ``assets/receipts.schema.json``, write, load."""

from inspector.receipts.document import (
    SCHEMA_ID,
    SCHEMA_VERSION,
    ReceiptsFileError,
    load_document,
    validate_document,
    write_document,
)

__all__ = [
    "SCHEMA_ID", "SCHEMA_VERSION", "ReceiptsFileError",
    "load_document", "validate_document", "write_document",
]
