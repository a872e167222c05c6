-- The `payments` example: how many times the provider's `charge.succeeded` event was applied
-- to a payment. `POST /webhooks/provider` adds one per event, through `#[idempotent]` keyed by
-- the event's `webhook-id`: the increment is deliberately not idempotent by itself, so a
-- repeated delivery applied twice would show as 2.
ALTER TABLE payments ADD COLUMN settlements INTEGER NOT NULL DEFAULT 0;
