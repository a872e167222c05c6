//! The `orders` example: `POST /orders` made safe to retry with one attribute.
//!
//! - `Authorization: Bearer <tenant>` is a stand-in for real authentication: the tenant is
//!   whatever the token says, if it matches `^[a-z0-9-]{1,64}$`. Replace [`BearerTenant`]
//!   with your own verified extractor.
//! - `POST /orders` takes `{"sku": "^[A-Z0-9-]{1,32}$", "quantity": 1..=20}` (and an optional
//!   `sent_at`, left out of the fingerprint) and is `#[idempotent(ttl = "24h", scope =
//!   "tenant", path = "POST /orders", exclude = ["body.sent_at"])]`.
//! - `GET /docs/idempotency.md` and `GET /openapi.json`: the documents. `/openapi.json` is
//!   the example's complete OpenAPI document ([`OrdersApi`], derived with `utoipa`) with
//!   idem's contract of `POST /orders` merged in ([`crate::docs`]).
//! - `GET /orders/{id}` returns the tenant's own order, `404` otherwise.
//!
//! The handlers are generic over the backend so one binary serves every store idem
//! supports; an application on one database writes them for that database directly.

use std::future::Future;

use axum::Router;
use axum::extract::{FromRequestParts, State};
use axum::http::request::Parts;
use axum::http::{StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use idem_runtime::docs::{DuplicateOperation, Operations};
use idem_runtime::store::Backend;
use idem_runtime::{Check, Checked, Idem, IdemState, Principal, Problem, idempotent};
use serde::{Deserialize, Serialize};
use sqlx::{MySql, Pool, Postgres, Sqlite, Transaction};
use utoipa::ToSchema;
use uuid::Uuid;

use crate::docs::{BearerScheme, ReadProblems, UNAUTHENTICATED};
use crate::extract::ProblemPath;

/// The application state: idem's handle, whose pool the handlers also use.
#[derive(Debug)]
pub struct AppState<DB: Backend> {
    /// Store handle and pool.
    pub idem: Idem<DB>,
}

impl<DB: Backend> Clone for AppState<DB> {
    fn clone(&self) -> Self {
        Self {
            idem: self.idem.clone(),
        }
    }
}

impl<DB: OrdersDb> IdemState<DB> for AppState<DB> {
    type Principal = BearerTenant;
    fn idem(&self) -> &Idem<DB> {
        &self.idem
    }
}

/// Demo authentication: `Authorization: Bearer <tenant>`.
///
/// Serialisable: a staged handler's key is stored with its principal (the tenant it
/// verified), so that the reconciler can resume it without the client's credentials.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct BearerTenant(pub String);

impl<S: Send + Sync> FromRequestParts<S> for BearerTenant {
    type Rejection = Problem;

    async fn from_request_parts(parts: &mut Parts, _state: &S) -> Result<Self, Problem> {
        let tenant = parts
            .headers
            .get(header::AUTHORIZATION)
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.strip_prefix("Bearer "))
            .filter(|t| {
                (1..=64).contains(&t.len())
                    && t.bytes()
                        .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
            });
        match tenant {
            Some(tenant) => Ok(Self(tenant.to_owned())),
            None => Err(Problem::new(
                StatusCode::UNAUTHORIZED,
                "urn:idem:example:unauthenticated",
                "authentication required",
            )
            .with_detail(
                "send `Authorization: Bearer <tenant>`, tenant matching ^[a-z0-9-]{1,64}$",
            )),
        }
    }
}

impl Principal for BearerTenant {
    fn tenant(&self) -> Option<&str> {
        Some(&self.0)
    }
}

/// The body of `POST /orders`.
#[derive(Debug, Clone, Deserialize, Serialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct NewOrder {
    /// What to order, `^[A-Z0-9-]{1,32}$`.
    #[schema(pattern = "^[A-Z0-9-]{1,32}$", example = "BOOK-1")]
    pub sku: String,
    /// How many, 1 to 20.
    #[schema(minimum = 1, maximum = 20, example = 2)]
    pub quantity: i32,
    /// Optional: when the client sent the request (RFC 3339), for its own records. Left out
    /// of the fingerprint (`exclude = ["body.sent_at"]`): a retry that stamps the time anew
    /// is the same request. The order does not keep it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schema(example = "2026-12-05T10:00:00Z")]
    pub sent_at: Option<String>,
}

impl Check for NewOrder {
    fn check(&self) -> Result<(), Problem> {
        let invalid = |detail: &str| {
            Problem::new(
                StatusCode::UNPROCESSABLE_ENTITY,
                "urn:idem:example:invalid-order",
                "invalid order",
            )
            .with_detail(detail)
        };
        let sku_ok = (1..=32).contains(&self.sku.len())
            && self
                .sku
                .bytes()
                .all(|b| b.is_ascii_uppercase() || b.is_ascii_digit() || b == b'-');
        if !sku_ok {
            return Err(invalid("`sku` must match ^[A-Z0-9-]{1,32}$"));
        }
        if !(1..=20).contains(&self.quantity) {
            return Err(invalid("`quantity` must be between 1 and 20"));
        }
        Ok(())
    }
}

/// An order as the API returns it.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq, ToSchema)]
pub struct Order {
    /// Its id.
    pub id: Uuid,
    /// What was ordered.
    pub sku: String,
    /// How many.
    pub quantity: i32,
}

/// The example's own queries, one implementation per backend.
pub trait OrdersDb: Backend {
    /// Applies the examples' migrations, which create the `orders` table (and the `payments`
    /// example's: the examples share one migration history).
    fn migrate_orders(
        pool: &Pool<Self>,
    ) -> impl Future<Output = Result<(), sqlx::migrate::MigrateError>> + Send;
    /// Inserts an order in the request's transaction.
    fn insert_order(
        conn: &mut <Self as sqlx::Database>::Connection,
        tenant: &str,
        order: &Order,
    ) -> impl Future<Output = Result<(), sqlx::Error>> + Send;
    /// Reads one of the tenant's orders.
    fn find_order(
        pool: &Pool<Self>,
        tenant: &str,
        id: Uuid,
    ) -> impl Future<Output = Result<Option<Order>, sqlx::Error>> + Send;
}

/// Whether the examples' queries are prepared (and cached by sqlx): not behind a transaction
/// pooler, which does not keep a prepared statement with its client
/// ([`Config::transaction_pooler`](idem_runtime::Config::transaction_pooler), set by
/// [`crate::server::connect`]). Unprepared, a query is parsed and bound in two exchanges, so
/// it runs inside a transaction.
pub(crate) fn prepared() -> bool {
    !idem_runtime::store::pooler::is_behind_transaction_pooler()
}

macro_rules! orders_db {
    ($db:ty, $migrations:literal, $insert:literal, $find:literal) => {
        impl OrdersDb for $db {
            async fn migrate_orders(pool: &Pool<Self>) -> Result<(), sqlx::migrate::MigrateError> {
                // idem keeps its own migration history: the application's is its own.
                sqlx::migrate!($migrations).run(pool).await
            }

            async fn insert_order(
                conn: &mut <Self as sqlx::Database>::Connection,
                tenant: &str,
                order: &Order,
            ) -> Result<(), sqlx::Error> {
                sqlx::query($insert)
                    .bind(order.id.to_string())
                    .bind(tenant)
                    .bind(&order.sku)
                    .bind(order.quantity)
                    .persistent(prepared())
                    .execute(conn)
                    .await?;
                Ok(())
            }

            async fn find_order(
                pool: &Pool<Self>,
                tenant: &str,
                id: Uuid,
            ) -> Result<Option<Order>, sqlx::Error> {
                let find = sqlx::query_as($find)
                    .bind(id.to_string())
                    .bind(tenant)
                    .persistent(prepared());
                let row: Option<(String, i32)> = if prepared() {
                    find.fetch_optional(pool).await?
                } else {
                    // Unprepared, parsed and bound in two exchanges: in one transaction,
                    // on one server session.
                    let mut tx = pool.begin().await?;
                    let row = find.fetch_optional(&mut *tx).await?;
                    tx.commit().await?;
                    row
                };
                Ok(row.map(|(sku, quantity)| Order { id, sku, quantity }))
            }
        }
    };
}

orders_db!(
    Postgres,
    "migrations/postgres",
    "INSERT INTO orders (id, tenant, sku, quantity) VALUES ($1::uuid, $2, $3, $4)",
    "SELECT sku, quantity FROM orders WHERE id = $1::uuid AND tenant = $2"
);
orders_db!(
    Sqlite,
    "migrations/sqlite",
    "INSERT INTO orders (id, tenant, sku, quantity) VALUES (?1, ?2, ?3, ?4)",
    "SELECT sku, quantity FROM orders WHERE id = ?1 AND tenant = ?2"
);
orders_db!(
    MySql,
    "migrations/mysql",
    "INSERT INTO orders (id, tenant, sku, quantity) VALUES (?, ?, ?, ?)",
    "SELECT sku, quantity FROM orders WHERE id = ? AND tenant = ?"
);

/// A database error of the example's own queries: `503` with `Retry-After` for what passes
/// (a lock held too long, the database restarting), `500` otherwise.
fn internal(error: &sqlx::Error) -> Problem {
    tracing::error!(%error, "database error");
    Problem::from_database(error)
}

/// `POST /orders`: creates an order. Safe to retry with the same `Idempotency-Key`.
#[utoipa::path(
    post,
    path = "/orders",
    tag = "orders",
    request_body = NewOrder,
    responses(
        (status = 201, description = "The order, created; `Location` names it", body = Order,
            headers(("Location" = String, description = "`/orders/{id}` of the new order"))),
        (status = 401, description = UNAUTHENTICATED, body = Problem,
            content_type = "application/problem+json"),
        (status = 422, description = "`sku` or `quantity` is out of range \
            (`urn:idem:example:invalid-order`)", body = Problem,
            content_type = "application/problem+json"),
    ),
    security(("bearer" = [])),
)]
#[idempotent(
    ttl = "24h",
    scope = "tenant",
    path = "POST /orders",
    exclude = ["body.sent_at"],
    problems = [problem(422, "urn:idem:example:invalid-order", "invalid order")]
)]
pub async fn create_order<DB: OrdersDb>(
    BearerTenant(tenant): BearerTenant,
    tx: &mut Transaction<'_, DB>,
    Checked(new): Checked<NewOrder>,
) -> Result<Response, Problem> {
    place_order::<DB>(&mut **tx, &tenant, new).await
}

/// The same handler without `#[idempotent]`, in its own transaction: what the benchmarks
/// compare against (`POST /bench/plain-orders`, only with `ORDERS_BENCH_ROUTES=1`).
pub async fn create_order_plain<DB: OrdersDb>(
    State(state): State<AppState<DB>>,
    BearerTenant(tenant): BearerTenant,
    Checked(new): Checked<NewOrder>,
) -> Result<Response, Problem> {
    let mut tx = state.idem.pool().begin().await.map_err(|e| internal(&e))?;
    let response = place_order::<DB>(&mut *tx, &tenant, new).await?;
    tx.commit().await.map_err(|e| internal(&e))?;
    Ok(response)
}

async fn place_order<DB: OrdersDb>(
    conn: &mut <DB as sqlx::Database>::Connection,
    tenant: &str,
    new: NewOrder,
) -> Result<Response, Problem> {
    let order = Order {
        id: Uuid::new_v4(),
        sku: new.sku,
        quantity: new.quantity,
    };
    DB::insert_order(conn, tenant, &order)
        .await
        .map_err(|e| internal(&e))?;
    let location = format!("/orders/{}", order.id);
    Ok((
        StatusCode::CREATED,
        [(header::LOCATION, location)],
        axum::Json(order),
    )
        .into_response())
}

/// `GET /orders/{id}`: the tenant's own order, `404` for anything else; `400` for a path
/// that does not decode ([`ProblemPath`]).
#[utoipa::path(
    get,
    path = "/orders/{id}",
    tag = "orders",
    params(("id" = Uuid, Path, description = "The order's id, as `Location` names it")),
    responses(
        (status = 200, description = "The order", body = Order),
        (status = 404, description = "The tenant has no order of this id \
            (`urn:idem:example:not-found`)", body = Problem,
            content_type = "application/problem+json"),
        ReadProblems,
    ),
    security(("bearer" = [])),
)]
pub async fn get_order<DB: OrdersDb>(
    State(state): State<AppState<DB>>,
    BearerTenant(tenant): BearerTenant,
    ProblemPath(id): ProblemPath<String>,
) -> Result<axum::Json<Order>, Problem> {
    let not_found = || {
        Problem::new(
            StatusCode::NOT_FOUND,
            "urn:idem:example:not-found",
            "order not found",
        )
    };
    let id = Uuid::parse_str(&id).map_err(|_| not_found())?;
    DB::find_order(state.idem.pool(), &tenant, id)
        .await
        .map_err(|e| internal(&e))?
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

/// The example's OpenAPI document, before idem's contract is merged in
/// ([`crate::docs::documents`]).
#[derive(Debug, utoipa::OpenApi)]
#[openapi(
    info(
        title = "orders",
        description = "The `orders` example of idem: `POST /orders` is safe to retry with an \
            `Idempotency-Key`."
    ),
    paths(create_order, get_order),
    modifiers(&BearerScheme),
    tags((name = "orders", description = "Orders of the caller's tenant")),
)]
pub struct OrdersApi;

/// The operation `create_order`, as the registry lists it, with its own responses as
/// [`OrdersApi`] describes them.
///
/// # Errors
/// When two `#[idempotent]` handlers linked into the program share an operation id.
pub fn operations() -> Result<Operations, DuplicateOperation> {
    let operations = Operations::from_registry()?.select(&[CREATE_ORDER]);
    Ok(crate::docs::with_responses(
        operations,
        &<OrdersApi as utoipa::OpenApi>::openapi(),
    ))
}

/// The operation id of [`create_order`].
pub const CREATE_ORDER: &str = "create_order:v1";

/// The example's routes.
pub fn router<DB: OrdersDb>(idem: Idem<DB>) -> Router {
    router_with(idem, false)
}

/// The example's routes, plus `POST /bench/plain-orders` when `bench_routes` is set.
pub fn router_with<DB: OrdersDb>(idem: Idem<DB>, bench_routes: bool) -> Router {
    let mut router = Router::new()
        .route("/orders", post(create_order::<DB>))
        .route("/orders/{id}", get(get_order::<DB>));
    if bench_routes {
        router = router.route("/bench/plain-orders", post(create_order_plain::<DB>));
    }
    let operations = operations().map(|o| o.served_by(idem.config()));
    router
        .merge(crate::docs::routes(
            operations,
            <OrdersApi as utoipa::OpenApi>::openapi(),
        ))
        .fallback(no_route)
        .method_not_allowed_fallback(no_method)
        .with_state(AppState { idem })
}
