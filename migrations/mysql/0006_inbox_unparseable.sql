-- idem: an inbox event may be `unparseable`: a signed delivery whose body the receiver could
-- not read as its event, kept for an operator rather than dropped (`idem inbox list`). One
-- statement: DDL commits on its own in MySQL, and the constraint is never missing.
ALTER TABLE idempotency_inbox DROP CONSTRAINT idempotency_inbox_status,
    ADD CONSTRAINT idempotency_inbox_status
        CHECK (status IN ('waiting', 'unmatched', 'unparseable'));
