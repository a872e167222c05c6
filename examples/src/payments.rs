//! The `payments` example: `POST /payments` charges a card at an outside provider exactly
//! once, however often the client retries and whichever process crashes, with idem's staged
//! mode.
//!
//! A database transaction cannot undo a card charge, so the atomic mode of `orders` does not
//! fit: the charge happens at the provider, outside any transaction of ours. The payment
//! instead runs as journaled steps under a lease on its idempotency key
//! ([`idem_runtime::staged`]):
//!
//! 1. **reserve** — [`create_payment`] is `#[idempotent(mode = "staged", …)]`: the attribute
//!    inserts the key as `processing` with the request (its body, and the tenant the bearer
//!    token named — never the token), a lease of `PAYMENTS_LEASE` and attempt number 1, in a
//!    transaction of its own. A retry of a completed key replays its response
//!    (`Idempotent-Replayed: true`); a retry with another body gets `422`; a retry while an
//!    attempt holds the lease gets `409` with `Retry-After`; a retry after the lease ran out
//!    takes the key over and resumes. The key never expires before it completes: its TTL
//!    (24 h) counts from completion.
//! 2. **charge** — an [`Attempt::step`]: `POST {PROVIDER_URL}/charges` with
//!    `Idempotency-Key: <provider key>`, a key derived from (scope, operation, key,
//!    reservation, `charge`) that is the same on every attempt. The provider's `201` (the charge) is recorded in the
//!    key's row before the next step. A `402` is a decline: a `402` problem is stored as the
//!    key's response, replayed to every retry, and no payment is written. Anything else —
//!    a `5xx`, a timeout, a refused connection, an answer that never arrives — leaves the key
//!    resumable and answers `503` with `Retry-After: 1`.
//! 3. **finish** — [`Attempt::finish`]: one transaction inserts the `payments` row and stores
//!    the `201` response (with `Location: /payments/<id>`), completing the key.
//!
//! A [`Reconciler`] running in every process resumes keys whose attempt died (the process
//! was killed and nobody retries) once their lease has run out: it sends the request stored
//! at reservation through the router again ([`idem_runtime::resume`]), and the handler
//! resumes after its recorded steps. A stuck payment completes within a few leases without
//! any client.
//!
//! # What may run twice, and why it is safe
//!
//! - **The charge request.** An attempt that dies after the provider charged but before the
//!   charge was recorded (the answer was lost, the process was killed) leaves the step
//!   unrecorded, and the next attempt sends the request again — with the same provider key.
//!   The provider deduplicates on that key and answers with the charge it made the first time
//!   (or the same decline): the card is charged once.
//! - **The code around the steps** (reading the tenant from the key's scope, deriving the
//!   payment id): it runs on every attempt and is pure computation.
//! - **Never twice: the `payments` row.** It is written in the same transaction that
//!   completes the key, and that transaction is fenced by the attempt number: an attempt
//!   whose lease was taken over cannot commit it. The payment id is derived from the key
//!   (every attempt writes the same id, the primary key) and `charge_id` is unique, so even a
//!   bug there could not add a second row.
//!
//! # The HTTP contract
//!
//! - `Authorization: Bearer <tenant>` ([`BearerTenant`], as in `orders`); keys are scoped
//!   to the tenant.
//! - `POST /payments` with `Idempotency-Key` (required: `400` without) and
//!   `{"amount": 1..=1000000, "currency": "^[A-Z]{3}$", "customer": "^[a-z0-9-]{1,64}$"}`
//!   (unknown fields refused): `201 {"id", "amount", "currency", "customer", "status":
//!   "succeeded", "charge_id"}`. Invalid values answer `422`, malformed JSON `400`.
//! - `GET /payments/{id}`: the tenant's own payment, `404` otherwise.
//! - `POST /webhooks/provider`: the provider's events, verified and applied once each
//!   ([`provider_event`]).
//! - `GET /docs/idempotency.md` and `GET /openapi.json`: the documents. `/openapi.json` is
//!   the example's complete OpenAPI document ([`PaymentsApi`], derived with `utoipa`) with
//!   idem's contract of its idempotent operations merged in ([`operations`],
//!   [`crate::docs`]).
//!
//! Every error is `application/problem+json` (a path that does not decode included:
//! [`ProblemPath`]), except hyper's own answers to a malformed or oversized request head
//! (see [`crate::server`]).

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use axum::Router;
use axum::extract::{DefaultBodyLimit, State};
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use idem_runtime::docs::{DuplicateOperation, Operations};
use idem_runtime::key;
use idem_runtime::outbox::OutboxMessage;
use idem_runtime::protocol::Record;
use idem_runtime::staged::{Attempt, Finished, Reconciler, StepError};
use idem_runtime::store::Backend;
use idem_runtime::webhooks::{Verified, WebhookSecret};
use idem_runtime::{Check, Checked, Idem, IdemState, JsonBody, Problem, idempotent};
use serde::{Deserialize, Serialize};
use serde_json::json;
use sqlx::{MySql, Pool, Postgres, Sqlite, Transaction};
use utoipa::ToSchema;
use uuid::Uuid;

use crate::docs::{BearerScheme, ReadProblems, UNAUTHENTICATED};
use crate::extract::ProblemPath;
pub use crate::orders::BearerTenant;
use crate::orders::{OrdersDb, prepared};

mod events;
pub use events::{
    Applied, ChargeEvent, DEFAULT_PROVIDER_WEBHOOK_SECRET, EVENT_ID_MISMATCH,
    PROVIDER_EVENT_OPERATION, ProviderEvent,
};

/// The operation's stored id.
pub const OPERATION: &str = "create_payment:v1";

/// `PROVIDER_URL`'s default.
pub const DEFAULT_PROVIDER_URL: &str = "http://127.0.0.1:3900";
/// `WEBHOOK_URL`'s default.
pub const DEFAULT_WEBHOOK_URL: &str = "http://127.0.0.1:3900/webhooks";
/// `PAYMENTS_LEASE`'s default.
pub const DEFAULT_LEASE: Duration = Duration::from_secs(30);

/// `PAYMENTS_UNMATCHED_AFTER`'s default: how long after its first delivery an event for a
/// charge no payment names is answered `503` ([`provider_event`]).
pub const DEFAULT_UNMATCHED_AFTER: Duration = Duration::from_secs(3600);

/// How long one request to the provider may take before the attempt gives up on it (and a
/// retry asks again, with the same provider key).
pub const PROVIDER_TIMEOUT: Duration = Duration::from_secs(5);

/// The `Retry-After` of a payment interrupted by the provider.
const RETRY_AFTER: Duration = Duration::from_secs(1);

/// The largest request body accepted.
const MAX_BODY: usize = 16 * 1024;

/// How often the reconciler looks for stuck payments: half the lease, between 1 s and 10 s,
/// so a stuck payment is resumed within about one and a half leases.
#[must_use]
pub fn reconcile_interval(lease: Duration) -> Duration {
    (lease / 2).clamp(Duration::from_secs(1), Duration::from_secs(10))
}

/// What the payment work needs besides its attempt: the provider.
#[derive(Debug)]
pub struct PaymentsCtx {
    /// The client for the provider, with [`PROVIDER_TIMEOUT`].
    pub http: reqwest::Client,
    /// The provider's base URL, without a trailing `/`.
    pub provider_url: String,
    /// How long after its first delivery an event for a charge no payment names is answered
    /// `503`, before it is acknowledged and kept as unmatched (`PAYMENTS_UNMATCHED_AFTER`,
    /// default [`DEFAULT_UNMATCHED_AFTER`]).
    pub unmatched_after: Duration,
}

impl PaymentsCtx {
    /// The context for a provider at `provider_url`.
    ///
    /// # Errors
    /// When the HTTP client cannot be built.
    pub fn new(provider_url: &str) -> Result<Self, reqwest::Error> {
        let http = reqwest::Client::builder()
            .timeout(PROVIDER_TIMEOUT)
            .connect_timeout(PROVIDER_TIMEOUT)
            .build()?;
        Ok(Self {
            http,
            provider_url: provider_url.trim_end_matches('/').to_owned(),
            unmatched_after: DEFAULT_UNMATCHED_AFTER,
        })
    }

    /// [`PaymentsCtx::unmatched_after`] set to `after`.
    #[must_use]
    pub fn unmatched_after(mut self, after: Duration) -> Self {
        self.unmatched_after = after;
        self
    }
}

/// The application state.
#[derive(Debug)]
pub struct AppState<DB: Backend> {
    /// Store handle and pool.
    pub idem: Idem<DB>,
    /// What [`pay`] needs.
    pub ctx: Arc<PaymentsCtx>,
    /// The provider's webhook secret (`PROVIDER_WEBHOOK_SECRET`): [`provider_event`]
    /// verifies deliveries with it.
    pub provider_webhooks: WebhookSecret,
}

impl<DB: Backend> Clone for AppState<DB> {
    fn clone(&self) -> Self {
        Self {
            idem: self.idem.clone(),
            ctx: Arc::clone(&self.ctx),
            provider_webhooks: self.provider_webhooks.clone(),
        }
    }
}

/// What [`provider_event`] verifies with: the provider's secret, keeping a signed delivery
/// that does not read as a [`ProviderEvent`] in the inbox as `unparseable`, from
/// [`PROVIDER_EVENT_OPERATION`].
impl<DB: Backend> axum::extract::FromRef<AppState<DB>> for WebhookSecret {
    fn from_ref(state: &AppState<DB>) -> Self {
        (state.provider_webhooks.clone()).keep_unparseable(&state.idem, PROVIDER_EVENT_OPERATION)
    }
}

impl<DB: PaymentsDb> IdemState<DB> for AppState<DB> {
    /// Stored with each payment's key (the tenant it names, not the token), so that the
    /// reconciler can resume the handler without the client.
    type Principal = BearerTenant;

    fn idem(&self) -> &Idem<DB> {
        &self.idem
    }
}

/// The body of `POST /payments`, also the request stored with the key for resuming.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize, Serialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct NewPayment {
    /// In the currency's smallest unit, 1 to 1000000.
    #[schema(minimum = 1, maximum = 1_000_000, example = 1250)]
    pub amount: i64,
    /// ISO 4217 code, `^[A-Z]{3}$`.
    #[schema(pattern = "^[A-Z]{3}$", example = "EUR")]
    pub currency: String,
    /// Who pays, `^[a-z0-9-]{1,64}$`.
    #[schema(pattern = "^[a-z0-9-]{1,64}$", example = "alice")]
    pub customer: String,
    /// Optional: when the client sent the request (RFC 3339), for its own records. Left out
    /// of the fingerprint (`exclude = ["body.sent_at"]`): a retry that stamps the time anew
    /// is the same request. The payment does not keep it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schema(example = "2026-12-05T10:00:00Z")]
    pub sent_at: Option<String>,
}

impl Check for NewPayment {
    fn check(&self) -> Result<(), Problem> {
        let invalid = |detail: &str| {
            Problem::new(
                StatusCode::UNPROCESSABLE_ENTITY,
                "urn:idem:example:invalid-payment",
                "invalid payment",
            )
            .with_detail(detail)
        };
        if !(1..=1_000_000).contains(&self.amount) {
            return Err(invalid("`amount` must be between 1 and 1000000"));
        }
        if !(self.currency.len() == 3 && self.currency.bytes().all(|b| b.is_ascii_uppercase())) {
            return Err(invalid("`currency` must match ^[A-Z]{3}$"));
        }
        let customer_ok = (1..=64).contains(&self.customer.len())
            && self
                .customer
                .bytes()
                .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-');
        if !customer_ok {
            return Err(invalid("`customer` must match ^[a-z0-9-]{1,64}$"));
        }
        Ok(())
    }
}

/// A payment as the API returns it.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize, Serialize, ToSchema)]
pub struct Payment {
    /// Its id, derived from the idempotency key.
    pub id: Uuid,
    /// In the currency's smallest unit.
    pub amount: i64,
    /// ISO 4217 code.
    pub currency: String,
    /// Who paid.
    pub customer: String,
    /// Always `succeeded`: declined payments are not written.
    #[schema(pattern = "^succeeded$")]
    pub status: String,
    /// The provider's charge.
    pub charge_id: String,
}

/// The provider's charge, as its `201` gives it: the `charge` step's recorded result.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize, Serialize)]
pub struct Charge {
    /// `ch_…`
    pub id: String,
    /// As charged.
    pub amount: i64,
    /// As charged.
    pub currency: String,
    /// As charged.
    pub customer: String,
}

/// The example's own queries, one implementation per backend. The tables come from the
/// examples' one migration history, applied by [`OrdersDb::migrate_orders`].
pub trait PaymentsDb: OrdersDb {
    /// Inserts a payment in the transaction that completes its key.
    fn insert_payment(
        conn: &mut <Self as sqlx::Database>::Connection,
        tenant: &str,
        payment: &Payment,
    ) -> impl Future<Output = Result<(), sqlx::Error>> + Send;
    /// Reads one of the tenant's payments.
    fn find_payment(
        pool: &Pool<Self>,
        tenant: &str,
        id: Uuid,
    ) -> impl Future<Output = Result<Option<Payment>, sqlx::Error>> + Send;
    /// Adds one to the settlements of the payment of `charge_id`, in the provider event's
    /// transaction; its id and settlements after, `None` when no payment names the charge.
    fn settle(
        conn: &mut <Self as sqlx::Database>::Connection,
        charge_id: &str,
    ) -> impl Future<Output = Result<Option<(String, i64)>, sqlx::Error>> + Send;
}

macro_rules! payments_db {
    ($db:ty, $insert:literal, $find:literal, $settle:literal, $settled:literal) => {
        impl PaymentsDb for $db {
            async fn insert_payment(
                conn: &mut <Self as sqlx::Database>::Connection,
                tenant: &str,
                payment: &Payment,
            ) -> Result<(), sqlx::Error> {
                sqlx::query($insert)
                    .bind(payment.id.to_string())
                    .bind(tenant)
                    .bind(payment.amount)
                    .bind(&payment.currency)
                    .bind(&payment.customer)
                    .bind(&payment.charge_id)
                    .persistent(prepared())
                    .execute(conn)
                    .await?;
                Ok(())
            }

            async fn find_payment(
                pool: &Pool<Self>,
                tenant: &str,
                id: Uuid,
            ) -> Result<Option<Payment>, sqlx::Error> {
                let find = sqlx::query_as($find)
                    .bind(id.to_string())
                    .bind(tenant)
                    .persistent(prepared());
                let row: Option<(i64, String, String, String)> = if prepared() {
                    find.fetch_optional(pool).await?
                } else {
                    // See `prepared`.
                    let mut tx = pool.begin().await?;
                    let row = find.fetch_optional(&mut *tx).await?;
                    tx.commit().await?;
                    row
                };
                Ok(row.map(|(amount, currency, customer, charge_id)| Payment {
                    id,
                    amount,
                    currency,
                    customer,
                    status: SUCCEEDED.to_owned(),
                    charge_id,
                }))
            }

            async fn settle(
                conn: &mut <Self as sqlx::Database>::Connection,
                charge_id: &str,
            ) -> Result<Option<(String, i64)>, sqlx::Error> {
                let updated = sqlx::query($settle)
                    .bind(charge_id)
                    .persistent(prepared())
                    .execute(&mut *conn)
                    .await?;
                if updated.rows_affected() == 0 {
                    return Ok(None);
                }
                let (id, settlements): (String, i64) = sqlx::query_as($settled)
                    .bind(charge_id)
                    .persistent(prepared())
                    .fetch_one(&mut *conn)
                    .await?;
                Ok(Some((id, settlements)))
            }
        }
    };
}

payments_db!(
    Postgres,
    "INSERT INTO payments (id, tenant, amount, currency, customer, charge_id) \
     VALUES ($1, $2, $3, $4, $5, $6) ON CONFLICT (id) DO NOTHING",
    "SELECT amount, currency, customer, charge_id FROM payments WHERE id = $1 AND tenant = $2",
    "UPDATE payments SET settlements = settlements + 1 WHERE charge_id = $1",
    "SELECT id, CAST(settlements AS BIGINT) FROM payments WHERE charge_id = $1"
);
payments_db!(
    Sqlite,
    "INSERT INTO payments (id, tenant, amount, currency, customer, charge_id) \
     VALUES (?1, ?2, ?3, ?4, ?5, ?6) ON CONFLICT (id) DO NOTHING",
    "SELECT amount, currency, customer, charge_id FROM payments WHERE id = ?1 AND tenant = ?2",
    "UPDATE payments SET settlements = settlements + 1 WHERE charge_id = ?1",
    "SELECT id, settlements FROM payments WHERE charge_id = ?1"
);
payments_db!(
    MySql,
    "INSERT INTO payments (id, tenant, amount, currency, customer, charge_id) \
     VALUES (?, ?, ?, ?, ?, ?) ON DUPLICATE KEY UPDATE id = id",
    "SELECT amount, currency, customer, charge_id FROM payments WHERE id = ? AND tenant = ?",
    "UPDATE payments SET settlements = settlements + 1 WHERE charge_id = ?",
    "SELECT id, CAST(settlements AS SIGNED) FROM payments WHERE charge_id = ?"
);

const SUCCEEDED: &str = "succeeded";

/// The topic of the event written with every payment, delivered to `WEBHOOK_URL`.
pub const PAYMENT_SUCCEEDED: &str = "payment.succeeded";

/// The payment work, shared by `POST /payments` and the [`Reconciler`]: charge (a recorded
/// step), then write the payment and its response (the last step). See the module docs for
/// what may run twice.
///
/// # Errors
/// [`StepError::Permanent`] with a `402` problem when the provider declines;
/// [`StepError::Retryable`] when the provider fails or cannot be reached; what the store
/// answers.
pub async fn pay<DB: PaymentsDb>(
    ctx: Arc<PaymentsCtx>,
    attempt: Attempt<DB>,
    request: NewPayment,
) -> Result<Finished, StepError> {
    // Runs on every attempt: pure computation from the key.
    let scope = attempt.key().scope;
    let tenant = scope.strip_prefix("tenant:").unwrap_or(scope);
    let id = payment_id(&attempt.provider_key("payment"))
        .map_err(|error| StepError::retryable(format!("payment id: {error}")))?;

    // Runs once per key, unless an attempt dies between the provider's answer and the
    // recording: then again, with the same provider key, and the provider answers with the
    // charge it made the first time.
    let charge: Charge = attempt
        .step("charge", async |provider_key| {
            charge(&ctx, provider_key, &request).await
        })
        .await?;

    let payment = Payment {
        id,
        amount: request.amount,
        currency: request.currency,
        customer: request.customer,
        status: SUCCEEDED.to_owned(),
        charge_id: charge.id,
    };
    // The event's id: what the receiver deduplicates on, the same on every attempt.
    let event = OutboxMessage::new(
        attempt.provider_key(PAYMENT_SUCCEEDED),
        PAYMENT_SUCCEEDED,
        json!({
            "payment_id": payment.id,
            "tenant": tenant,
            "amount": payment.amount,
            "currency": payment.currency,
            "charge_id": payment.charge_id,
        }),
    );
    attempt
        .finish(async |tx| {
            DB::insert_payment(&mut **tx, tenant, &payment).await?;
            // In the transaction that completes the key: the event exists exactly when the
            // payment does, and the dispatcher delivers it after the commit.
            attempt
                .idem()
                .enqueue(tx, &event)
                .await
                .map_err(|error| StepError::retryable(format!("outbox: {error}")))?;
            let mut record = Record::json(StatusCode::CREATED, &payment)?;
            let location = HeaderValue::try_from(format!("/payments/{}", payment.id))
                .map_err(|_| StepError::retryable("the payment id is not a header value"))?;
            record.headers.insert(header::LOCATION, location);
            Ok(record)
        })
        .await
}

/// The payment's id, from the key's provider key for `payment` (a hash of the scope,
/// operation, key and reservation): every attempt at one reservation of the key writes the
/// same id, and so does the same request reserved again after its row was lost.
fn payment_id(provider_key: &str) -> Result<Uuid, uuid::Error> {
    // `idem_` and 32 hexadecimal digits: the 128 bits of a UUID.
    let bits = Uuid::try_parse(provider_key.trim_start_matches("idem_"))?;
    Ok(uuid::Builder::from_custom_bytes(bits.into_bytes()).into_uuid())
}

/// The `charge` step: one request to the provider. Its `201` is the charge and its `402` a
/// decline; any other answer, or none, is classified by [`StepError::from_response`] and
/// [`StepError`]'s `From<reqwest::Error>`: a `5xx`, a timeout or a refused connection leaves
/// the payment resumable (`503`, `Retry-After`), a permanent refusal (a `4xx` such as the
/// provider's `422` for a provider key reused with another amount) ends it.
async fn charge(
    ctx: &PaymentsCtx,
    provider_key: String,
    request: &NewPayment,
) -> Result<Charge, StepError> {
    let response = ctx
        .http
        .post(format!("{}/charges", ctx.provider_url))
        .header(key::HEADER, &provider_key)
        .json(request)
        .send()
        .await?;
    match response.status() {
        StatusCode::CREATED => Ok(response.json::<Charge>().await?),
        StatusCode::PAYMENT_REQUIRED => {
            tracing::info!(provider_key, "charge declined");
            Err(StepError::permanent(declined()))
        }
        _ => Err(StepError::from_response(&response)),
    }
}

/// The stored answer to a declined payment.
fn declined() -> Problem {
    Problem::new(
        StatusCode::PAYMENT_REQUIRED,
        "urn:idem:example:payment-declined",
        "payment declined",
    )
    .with_detail("the card was declined; nothing was charged")
}

/// `POST /payments`: charges once per key. Safe to retry with the same `Idempotency-Key`.
///
/// Everything idempotent about it is the attribute's: the key (required), the fingerprint of
/// the body, the reservation with the request and the tenant, the lease and its heartbeat,
/// the stored response and its replay, resumption by a retry or by the [`Reconciler`]. The
/// attempt runs on a task of its own, so a client that hangs up does not abandon it midway.
#[utoipa::path(
    post,
    path = "/payments",
    tag = "payments",
    request_body = NewPayment,
    responses(
        (status = 201, description = "The payment, charged once; `Location` names it",
            body = Payment,
            headers(("Location" = String, description = "`/payments/{id}` of the payment"))),
        (status = 401, description = UNAUTHENTICATED, body = Problem,
            content_type = "application/problem+json"),
        (status = 402, description = "The provider declined the card \
            (`urn:idem:example:payment-declined`); nothing was charged", body = Problem,
            content_type = "application/problem+json"),
        (status = 422, description = "`amount`, `currency` or `customer` is out of range \
            (`urn:idem:example:invalid-payment`)", body = Problem,
            content_type = "application/problem+json"),
    ),
    security(("bearer" = [])),
)]
#[idempotent(
    mode = "staged",
    scope = "tenant",
    ttl = "24h",
    lease = "30s",
    path = "POST /payments",
    exclude = ["body.sent_at"],
    problems = [
        problem(402, "urn:idem:example:payment-declined", "payment declined"),
        problem(422, "urn:idem:example:invalid-payment", "invalid payment"),
    ]
)]
pub async fn create_payment<DB: PaymentsDb>(
    State(state): State<AppState<DB>>,
    attempt: Attempt<DB>,
    Checked(new): Checked<NewPayment>,
) -> Result<Finished, StepError> {
    pay(state.ctx, attempt, new).await
}

/// `POST /webhooks/provider`: the provider's events, applied once each.
///
/// The delivery is verified first ([`Verified`], Standard Webhooks with
/// `PROVIDER_WEBHOOK_SECRET`): a missing, forged or stale signature answers `401` and
/// nothing is applied. The event's `webhook-id` is its idempotency key, and its one
/// identity: a repeated delivery of an event replays the stored `200` and applies nothing,
/// and a delivery whose body `id` is not its `webhook-id` is refused (`422`
/// `urn:idem:example:event-id-mismatch`, naming neither) and applies nothing, so that an
/// event sent again under another `webhook-id` is not applied twice.
///
/// A signed delivery whose body does not read as an event (a field missing or renamed) is
/// answered `422` `urn:idem:problem:invalid-body` (its detail says where, never what was
/// sent) and kept first in the inbox as unparseable, with its `webhook-id` and its body as
/// sent, for an operator (`idem inbox list --status unparseable`): nothing is lost if the
/// provider gives up on it. A redelivery counts on the same row.
///
/// A `charge.succeeded` adds one to the settlements of the payment naming its charge. The
/// provider sends it as soon as it charges, so it can arrive before the payment that names
/// the charge is committed: then nothing is applied or stored, and the answer is `503` with
/// `Retry-After: 1`, so that the provider delivers it again (failed responses are not stored:
/// the key stays free). That lasts `PAYMENTS_UNMATCHED_AFTER` (an hour by default) from the
/// event's first delivery: a charge that no payment names by then
/// exists without one (its attempt was fenced out by an operator's forced action, say), and
/// the event is acknowledged (`200`, `"unmatched": true`) and kept in the inbox as
/// unmatched, for an operator to refund or reconcile (`idem inbox list`). Events of other
/// types are acknowledged and ignored. (Idem's side of it: `Idem::unapplied`.)
#[utoipa::path(
    post,
    path = "/webhooks/provider",
    tag = "webhooks",
    request_body = ProviderEvent,
    responses(
        (status = 200, description = "The event was applied (or, for a type this service \
            ignores, acknowledged); `settlements` is the payment's count after it. \
            `unmatched`: no payment named its charge for `PAYMENTS_UNMATCHED_AFTER` after its \
            first delivery, and it is kept for an operator", body = Applied),
        (status = 422, description = "The body's `id` is not the delivery's `webhook-id` \
            (`urn:idem:example:event-id-mismatch`): nothing was applied or stored. A body that \
            does not read as an event (`urn:idem:problem:invalid-body`) is kept in the inbox as \
            unparseable, for an operator", body = Problem,
            content_type = "application/problem+json"),
        (status = 503, description = "No payment names the event's charge yet \
            (`urn:idem:example:charge-not-recorded-yet`); nothing was applied or stored: \
            deliver the event again after `Retry-After` (for `PAYMENTS_UNMATCHED_AFTER` after \
            its first delivery; then it is acknowledged as unmatched)", body = Problem,
            content_type = "application/problem+json",
            headers(("Retry-After" = u32, description = "Seconds to wait before delivering again"))),
    ),
    security(("standardWebhooks" = [])),
)]
#[idempotent(
    scope = "global",
    key = header("webhook-id"),
    ttl = "7d",
    path = "POST /webhooks/provider",
    problems = [
        problem(422, "urn:idem:example:event-id-mismatch", "event id is not its webhook-id"),
        problem(
            503,
            "urn:idem:example:charge-not-recorded-yet",
            "charge not recorded yet",
            retry_after
        ),
    ]
)]
pub async fn provider_event<DB: PaymentsDb>(
    State(state): State<AppState<DB>>,
    #[not_input] headers: HeaderMap,
    tx: &mut Transaction<'_, DB>,
    Verified(JsonBody(event)): Verified<JsonBody<ProviderEvent>>,
) -> Result<axum::Json<Applied>, Problem> {
    events::one_identity(&headers, &event)?;
    events::apply(&state, tx, event).await
}

/// The reconciler of this process: resumes stuck payments through `router` (the example's
/// own, [`router`]), every [`reconcile_interval`].
#[must_use]
pub fn reconciler<DB: PaymentsDb>(idem: Idem<DB>, router: Router) -> Reconciler<DB> {
    Reconciler::new(idem).router(router)
}

/// `GET /payments/{id}`: the tenant's own payment, `404` for anything else.
#[utoipa::path(
    get,
    path = "/payments/{id}",
    tag = "payments",
    params(("id" = Uuid, Path, description = "The payment's id, as `Location` names it")),
    responses(
        (status = 200, description = "The payment", body = Payment),
        (status = 404, description = "The tenant has no payment of this id \
            (`urn:idem:example:not-found`)", body = Problem,
            content_type = "application/problem+json"),
        ReadProblems,
    ),
    security(("bearer" = [])),
)]
pub async fn get_payment<DB: PaymentsDb>(
    State(state): State<AppState<DB>>,
    BearerTenant(tenant): BearerTenant,
    ProblemPath(id): ProblemPath<String>,
) -> Result<axum::Json<Payment>, Problem> {
    let not_found = || {
        Problem::new(
            StatusCode::NOT_FOUND,
            "urn:idem:example:not-found",
            "payment not found",
        )
    };
    let id = Uuid::parse_str(&id).map_err(|_| not_found())?;
    DB::find_payment(state.idem.pool(), &tenant, id)
        .await
        .map_err(|error| {
            tracing::error!(%error, "database error");
            Problem::from_database(&error)
        })?
        .map(axum::Json)
        .ok_or_else(not_found)
}

async fn no_route() -> Response {
    Problem::new(
        StatusCode::NOT_FOUND,
        "urn:idem:example:not-found",
        "no such resource",
    )
    .into_response()
}

async fn no_method() -> Response {
    Problem::new(
        StatusCode::METHOD_NOT_ALLOWED,
        "urn:idem:example:method-not-allowed",
        "method not allowed",
    )
    .into_response()
}

/// Adds the provider's webhook scheme to a document: Standard Webhooks signatures.
#[derive(Debug, Clone, Copy)]
pub struct WebhookScheme;

impl utoipa::Modify for WebhookScheme {
    fn modify(&self, openapi: &mut utoipa::openapi::OpenApi) {
        use utoipa::openapi::security::{ApiKey, ApiKeyValue, SecurityScheme};
        let scheme = ApiKeyValue::with_description(
            "webhook-signature",
            "Standard Webhooks: `v1,<base64 HMAC-SHA256>` of `<webhook-id>.<webhook-timestamp>.<body>` \
             with `PROVIDER_WEBHOOK_SECRET`; a delivery signed more than 5 minutes ago is refused.",
        );
        openapi
            .components
            .get_or_insert_with(Default::default)
            .add_security_scheme(
                "standardWebhooks",
                SecurityScheme::ApiKey(ApiKey::Header(scheme)),
            );
    }
}

/// The example's OpenAPI document, before idem's contract is merged in
/// ([`crate::docs::documents`]).
#[derive(Debug, utoipa::OpenApi)]
#[openapi(
    info(
        title = "payments",
        description = "The `payments` example of idem: `POST /payments` charges once per \
            `Idempotency-Key`; `POST /webhooks/provider` applies each of the provider's events \
            once."
    ),
    paths(create_payment, get_payment, provider_event),
    modifiers(&BearerScheme, &WebhookScheme),
    tags(
        (name = "payments", description = "Payments of the caller's tenant"),
        (name = "webhooks", description = "Events the payment provider sends"),
    ),
)]
pub struct PaymentsApi;

/// The operations `POST /payments` and `POST /webhooks/provider` run, as the registry lists
/// them (and only them: the `orders` handler linked into the same library is not served
/// here), with their own responses as [`PaymentsApi`] describes them.
///
/// # Errors
/// When two `#[idempotent]` handlers linked into the program share an operation id.
pub fn operations() -> Result<Operations, DuplicateOperation> {
    let operations = Operations::from_registry()?.select(&[OPERATION, PROVIDER_EVENT_OPERATION]);
    Ok(crate::docs::with_responses(
        operations,
        &<PaymentsApi as utoipa::OpenApi>::openapi(),
    ))
}

/// The example's routes.
pub fn router<DB: PaymentsDb>(state: AppState<DB>) -> Router {
    let operations = operations().map(|o| o.served_by(state.idem.config()));
    Router::new()
        .route("/payments", post(create_payment::<DB>))
        .route("/payments/{id}", get(get_payment::<DB>))
        .route("/webhooks/provider", post(provider_event::<DB>))
        .merge(crate::docs::routes(
            operations,
            <PaymentsApi as utoipa::OpenApi>::openapi(),
        ))
        .fallback(no_route)
        .method_not_allowed_fallback(no_method)
        .layer(DefaultBodyLimit::max(MAX_BODY))
        .with_state(state)
}
