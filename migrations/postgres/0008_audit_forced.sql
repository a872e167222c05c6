-- idem: whether an operator action was applied only because the operator forced it over a
-- refusal (a live lease, the delete of a completed staged key). A constant default rewrites
-- nothing: earlier entries read as not forced.
ALTER TABLE idempotency_audit ADD COLUMN forced BOOLEAN NOT NULL DEFAULT FALSE;
