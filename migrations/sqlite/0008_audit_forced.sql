-- idem: whether an operator action was applied only because the operator forced it over a
-- refusal (a live lease, the delete of a completed staged key); 0 or 1. Earlier entries read
-- as not forced. (Version 8 as on PostgreSQL; SQLite has no migration 7.)
ALTER TABLE idempotency_audit ADD COLUMN forced INTEGER NOT NULL DEFAULT 0;
