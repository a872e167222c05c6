-- idem: the client's contract of each registered operation, as JSON (idem-docs'
-- `OperationDoc`: its policy, route and handler), so tools document operations without the
-- service's binary.
ALTER TABLE idempotency_operations ADD COLUMN doc TEXT;
