//! Staged mode: exactly-once for effects outside the database.
//!
//! A database transaction cannot undo a card charge or an email. In staged mode the key is
//! reserved at once, in its own short transaction (status `processing`, the request, a lease
//! and an attempt number), and the work runs as named, journaled steps:
//!
//! - [`Attempt::step`] calls another system. It receives a provider key derived from
//!   (scope, operation, key, reservation, step) — the same on every attempt — to send as that system's
//!   own idempotency key, and its result (any serde type) is recorded in the key's row, the
//!   recovery point, in a short transaction of its own.
//! - [`Attempt::db_step`] runs database writes in a transaction that also records its
//!   result.
//! - [`Attempt::finish`] runs the last writes and stores the response in one transaction.
//!
//! An attempt holds the key with a lease its heartbeat renews every third of it. If the
//! attempt dies (the process is killed, the provider times out), the key stays
//! `processing`; once the lease has run out, the next retry with the same key — or the
//! [`Reconciler`] — takes it over with a new attempt number and runs the work again from the
//! start: recorded steps return their recorded result without running, and the first
//! unrecorded step runs again **with the same provider key**, so the provider answers with
//! what it did the first time.
//!
//! # What may run twice
//!
//! - The closure of a [`Attempt::step`] whose attempt died between the provider's answer and
//!   the recording: it runs again with the same provider key. Only call systems that
//!   deduplicate on that key (or whose effect is harmless to repeat) from it.
//! - Code between steps, outside any step: it runs on every attempt. Keep it to pure
//!   computation.
//! - Never: a recorded step, or a [`Attempt::db_step`] / [`Attempt::finish`] whose
//!   transaction committed.
//!
//! An attempt whose request is dropped (its client went away) stops where it is: its
//! heartbeat stops with it, the lease runs out, and the next retry or the reconciler
//! resumes the key.
//!
//! Every write of an attempt is fenced by its reservation and its attempt number: an attempt
//! whose lease was taken over, or whose key an operator completed, failed or deleted, can no
//! longer record, finish or release anything ([`StepError::LeaseLost`]) — with one gap: after
//! a forced delete, the same request reserved again is the same reservation (below) and
//! counts its attempts from 1 again, so an old attempt 1 still running could write to the
//! new row. The operator tool says so before a forced delete of a running key. A reservation is one life of a key's row for one request: a
//! key deleted and reserved again by another request, or expired and executed again, is a
//! new reservation, with new provider keys, whose attempts count from 1 again. The same
//! request reserved again after its row was lost (a promoted standby that had not received
//! it, an operator's forced delete) is the same reservation: its provider keys are the ones
//! its first attempts sent ([`Attempt::provider_key`], [`provider_key`]).
//!
//! # Outcomes
//!
//! | the work returns | the key | the client |
//! |---|---|---|
//! | `Ok(`[`Finished`]`)` from [`Attempt::finish`] | completed with the response | the response, replayed to every retry |
//! | [`StepError::permanent`] (a declined card) | completed with that error response | the error, replayed to every retry |
//! | [`StepError::Retryable`] (a provider timeout) | processing, lease released | `503` with `Retry-After`; a retry resumes |
//! | a panic | processing, lease released | `500`; a retry resumes |
//!
//! ```no_run
//! use idem_runtime::staged::{Attempt, Finished, StepError};
//! use idem_runtime::protocol::Record;
//! use idem_runtime::spec::{Mode, OperationSpec, Scope};
//! use idem_runtime::{Idem, IdempotencyKey};
//! use idem_runtime::sqlx::Sqlite;
//! use std::time::Duration;
//!
//! const CHARGE: OperationSpec = OperationSpec::new("charge:v1")
//!     .mode(Mode::Staged)
//!     .lease(Duration::from_secs(30));
//!
//! async fn charge(attempt: Attempt<Sqlite>, amount: u64) -> Result<Finished, StepError> {
//!     // Runs once; on a resumed attempt, returns what the first recorded.
//!     let charge_id: String = attempt
//!         .step("charge", async |provider_key| {
//!             // POST /charges with `Idempotency-Key: provider_key` …
//!             Ok(format!("ch_{provider_key}"))
//!         })
//!         .await?;
//!     // The writes and the response commit together; the closure borrows what it needs.
//!     attempt
//!         .finish(async |tx| {
//!             sqlx::query("INSERT INTO payments (charge_id, amount) VALUES (?1, ?2)")
//!                 .bind(&charge_id)
//!                 .bind(amount as i64)
//!                 .execute(&mut **tx)
//!                 .await?;
//!             Ok(Record::json(http::StatusCode::CREATED, &serde_json::json!({"charge": charge_id}))?)
//!         })
//!         .await
//! }
//!
//! # async fn demo(idem: Idem<Sqlite>, key: IdempotencyKey) -> Result<(), idem_runtime::Error> {
//! let outcome = idem
//!     .staged(&CHARGE, &Scope::global(), &key, &1200_u64, |attempt| charge(attempt, 1200))
//!     .await?;
//! # Ok(()) }
//! ```
//!
//! An `#[idempotent(mode = "staged")]` handler is the same work behind the attribute, and
//! [`Reconciler::router`] resumes it without its client ([`crate::resume`]).

mod attempt;
mod error;
mod reconciler;
mod run;
mod start;

pub use attempt::{Attempt, provider_key};
use attempt::{AttemptState, heartbeat, next, reservation_id, store_record};
pub use error::{Finished, StepError};
pub use reconciler::{Reconciled, Reconciler, ReconcilerHandle};

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use serde_json::Value;

    use super::*;
    use crate::store::KeyRef;

    #[test]
    fn provider_answers_are_classified() {
        use http::StatusCode as S;
        for status in [
            S::REQUEST_TIMEOUT,
            S::CONFLICT,
            S::TOO_EARLY,
            S::TOO_MANY_REQUESTS,
            S::INTERNAL_SERVER_ERROR,
            S::BAD_GATEWAY,
            S::SERVICE_UNAVAILABLE,
            S::OK,
            S::FOUND,
        ] {
            let after = Some(Duration::from_secs(7));
            match StepError::from_status(status, after) {
                StepError::Retryable { retry_after, .. } => assert_eq!(retry_after, after),
                other => panic!("{status}: {other}"),
            }
        }
        for status in [
            S::BAD_REQUEST,
            S::UNAUTHORIZED,
            S::PAYMENT_REQUIRED,
            S::NOT_FOUND,
            S::GONE,
            S::UNPROCESSABLE_ENTITY,
        ] {
            let StepError::Permanent(record) = StepError::from_status(status, None) else {
                panic!("{status}: not permanent");
            };
            assert_eq!(record.status, S::UNPROCESSABLE_ENTITY);
            assert_eq!(
                record.headers[http::header::CONTENT_TYPE],
                "application/problem+json"
            );
            let problem: Value = serde_json::from_slice(&record.body).unwrap();
            assert_eq!(problem["type"], StepError::REFUSED);
            let detail = problem["detail"].as_str().unwrap();
            assert!(detail.contains(&status.to_string()), "{detail}");
        }
    }

    #[test]
    fn the_same_request_is_the_same_reservation() {
        let key = KeyRef {
            scope: "tenant:a",
            operation: "pay:v1",
            key: "k1",
        };
        let first = reservation_id(key, b"request", false);
        // Reserved again after its row was lost: the same reservation, the same provider keys.
        assert_eq!(first, reservation_id(key, b"request", false));
        assert_ne!(first, 0);
        // Another request under the key, or another key: another reservation.
        assert_ne!(first, reservation_id(key, b"another", false));
        assert_ne!(
            first,
            reservation_id(KeyRef { key: "k2", ..key }, b"request", false)
        );
        // A key executed again after it expired: a new life, new each time.
        let again = reservation_id(key, b"request", true);
        assert_ne!(again, 0);
        assert_ne!(again, first);
        assert_ne!(again, reservation_id(key, b"request", true));
    }

    #[test]
    fn provider_keys_are_stable_and_distinct() {
        let key = KeyRef {
            scope: "tenant:a",
            operation: "pay:v1",
            key: "k1",
        };
        let a = provider_key(key, 7, "charge");
        assert_eq!(a, provider_key(key, 7, "charge"));
        assert_eq!(a.len(), 37);
        assert!(a.starts_with("idem_"));
        assert_ne!(a, provider_key(key, 7, "refund"));
        let other = KeyRef { key: "k2", ..key };
        assert_ne!(a, provider_key(other, 7, "charge"));
        // Another reservation of the same key (deleted, reserved again): other effects.
        assert_ne!(a, provider_key(key, 8, "charge"));
        // Length prefixes: moving a character between parts changes the key.
        let shifted = KeyRef {
            scope: "tenant:",
            operation: "apay:v1",
            key: "k1",
        };
        assert_ne!(a, provider_key(shifted, 7, "charge"));
        // A row reserved before reservations existed keeps the key its attempts sent.
        assert_eq!(
            provider_key(key, 0, "charge"),
            "idem_35afa7339cf564f691b21a71699f293d"
        );
    }
}
