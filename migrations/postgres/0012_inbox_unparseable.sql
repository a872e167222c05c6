-- idem: an inbox event may be `unparseable`: a signed delivery whose body the receiver could
-- not read as its event, kept for an operator rather than dropped (`idem inbox list`).
ALTER TABLE idempotency_inbox DROP CONSTRAINT idempotency_inbox_status_check,
    ADD CONSTRAINT idempotency_inbox_status_check
        CHECK (status IN ('waiting', 'unmatched', 'unparseable'));
