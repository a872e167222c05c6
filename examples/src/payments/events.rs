//! The provider's events as `POST /webhooks/provider` ([`super::provider_event`]) reads and
//! applies them: their types, their one identity, and how one is applied.
//!
//! - **One identity.** A delivery's `webhook-id` is its idempotency key, and the body's `id`
//!   names the same event: the inbox and the `applied` mark use it. A delivery whose body
//!   `id` is not its `webhook-id` is refused ([`one_identity`]: `422`
//!   `urn:idem:example:event-id-mismatch`, nothing applied or stored), so that an event sent
//!   again under another `webhook-id` cannot be applied twice.
//! - **Kept when it does not read.** A signed delivery whose body is not a [`ProviderEvent`]
//!   is answered `422` `urn:idem:problem:invalid-body` (its detail names no value of the
//!   body) and kept first in the inbox as `unparseable`, with its `webhook-id` and its body
//!   as sent (the state's `WebhookSecret`, with `keep_unparseable`); a redelivery counts on
//!   the same row.

use axum::http::{HeaderMap, StatusCode};
use idem_runtime::Problem;
use idem_runtime::inbox::Unapplied;
use idem_runtime::store::Delivery;
use idem_runtime::webhooks::HEADER_WEBHOOK_ID;
use serde::{Deserialize, Serialize};
use sqlx::Transaction;
use utoipa::ToSchema;

use super::{AppState, PaymentsDb, RETRY_AFTER};

/// The operation id of `POST /webhooks/provider`.
pub const PROVIDER_EVENT_OPERATION: &str = "provider_event:v1";

/// `PROVIDER_WEBHOOK_SECRET`'s default, the `fake-provider` example's.
pub const DEFAULT_PROVIDER_WEBHOOK_SECRET: &str = "whsec_aWRlbS1leGFtcGxlLXNlY3JldA==";

/// The problem type of a delivery whose body `id` is not its `webhook-id`.
pub const EVENT_ID_MISMATCH: &str = "urn:idem:example:event-id-mismatch";

/// The provider's event of a charge, as `POST /webhooks/provider` takes it:
/// `{"id": "evt_…", "type": "charge.succeeded", "data": {"charge_id", "amount", "currency"}}`.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize, Serialize, ToSchema)]
pub struct ProviderEvent {
    /// The event's id (also its `webhook-id`).
    pub id: String,
    /// `charge.succeeded`; other types are acknowledged and ignored.
    #[serde(rename = "type")]
    pub kind: String,
    /// The charge.
    pub data: ChargeEvent,
}

/// What a `charge.succeeded` event says.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize, Serialize, ToSchema)]
pub struct ChargeEvent {
    /// The provider's charge, `ch_…`: the payment it paid names it.
    pub charge_id: String,
    /// As charged.
    #[serde(default)]
    pub amount: i64,
    /// As charged.
    #[serde(default)]
    pub currency: String,
}

/// The answer to an applied event, stored with its key and replayed to every repeat.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize, Serialize, ToSchema)]
pub struct Applied {
    /// The event.
    pub event_id: String,
    /// The payment it was applied to; `None` for an event type this service ignores.
    pub payment_id: Option<String>,
    /// The payment's settlements after it.
    pub settlements: Option<i64>,
    /// `true` when no payment names the event's charge and it is kept as unmatched for an
    /// operator (`idem inbox list`) instead of being applied.
    #[serde(default)]
    pub unmatched: bool,
}

/// Refuses a delivery whose body `id` is not its `webhook-id` (`headers`): `422`
/// [`EVENT_ID_MISMATCH`], which names neither.
///
/// # Errors
/// The refusal.
pub fn one_identity(headers: &HeaderMap, event: &ProviderEvent) -> Result<(), Problem> {
    let webhook_id = headers.get(HEADER_WEBHOOK_ID).map(|id| id.as_bytes());
    if webhook_id == Some(event.id.as_bytes()) {
        return Ok(());
    }
    tracing::warn!("provider event refused: its body's id is not its webhook-id");
    Err(Problem::new(
        StatusCode::UNPROCESSABLE_ENTITY,
        EVENT_ID_MISMATCH,
        "event id is not its webhook-id",
    )
    .with_detail(
        "the body's `id` and the `webhook-id` header name two events; one event has one id: \
         nothing was applied",
    ))
}

/// Applies `event` in `tx`: a `charge.succeeded` settles the payment naming its charge once;
/// one no payment names yet is answered `503` for a while, then kept as unmatched
/// ([`Idem::unapplied`]); other types are acknowledged and ignored.
///
/// # Errors
/// The `503` of an early event; a database error's problem.
pub async fn apply<DB: PaymentsDb>(
    state: &AppState<DB>,
    tx: &mut Transaction<'_, DB>,
    event: ProviderEvent,
) -> Result<axum::Json<Applied>, Problem> {
    let mut applied = Applied {
        event_id: event.id.clone(),
        payment_id: None,
        settlements: None,
        unmatched: false,
    };
    if event.kind != "charge.succeeded" {
        tracing::info!(event = %event.id, kind = %event.kind, "provider event ignored");
        return Ok(axum::Json(applied));
    }
    let settled = DB::settle(&mut **tx, &event.data.charge_id).await;
    if let Some((payment_id, settlements)) = settled.map_err(database)? {
        let idem = &state.idem;
        let marked = idem.applied(&mut **tx, PROVIDER_EVENT_OPERATION, &event.id);
        marked.await.map_err(database)?;
        applied.payment_id = Some(payment_id);
        applied.settlements = Some(settlements);
        return Ok(axum::Json(applied));
    }
    unmatched(state, tx, &event).await?;
    applied.unmatched = true;
    Ok(axum::Json(applied))
}

/// An event whose charge no payment names: `Ok` once it is kept as unmatched, the `503` of
/// an early event before.
async fn unmatched<DB: PaymentsDb>(
    state: &AppState<DB>,
    tx: &mut Transaction<'_, DB>,
    event: &ProviderEvent,
) -> Result<(), Problem> {
    let body = serde_json::to_string(event).unwrap_or_default();
    let delivery = Delivery {
        source: PROVIDER_EVENT_OPERATION,
        event_id: &event.id,
        reason: "no payment names the event's charge",
        body: &body,
    };
    let after = state.ctx.unmatched_after;
    match state.idem.unapplied(&mut **tx, delivery, after).await {
        Ok(Unapplied::Kept) => Ok(()),
        Ok(Unapplied::Retry) => {
            tracing::info!(
                event = %event.id,
                charge = %event.data.charge_id,
                "provider event before its payment; the provider delivers it again"
            );
            Err(Problem::new(
                StatusCode::SERVICE_UNAVAILABLE,
                "urn:idem:example:charge-not-recorded-yet",
                "charge not recorded yet",
            )
            .with_detail(
                "no payment names this charge yet (it may still be committing); nothing was \
                 applied: deliver the event again",
            )
            .with_retry_after(RETRY_AFTER))
        }
        Err(error) => Err(database(error)),
    }
}

/// A database error's problem, logged.
fn database(error: sqlx::Error) -> Problem {
    tracing::error!(%error, "database error");
    Problem::from_database(&error)
}
