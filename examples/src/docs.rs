//! `GET /docs/idempotency.md` and `GET /openapi.json`: the example's documents.
//!
//! `/openapi.json` is one complete OpenAPI 3.1 document: the example's own, derived with
//! `utoipa` from its types (`#[derive(ToSchema)]`) and routes (`#[utoipa::path]`) — request
//! and response bodies, path parameters, the security schemes — with idem's contract of its
//! idempotent operations merged in ([`idem_runtime::docs::merge_into`]): the key's header,
//! every response idem can answer, with its body schema, and `x-idempotency`. The Markdown
//! document is idem's contract, listing the example's own responses as `#[utoipa::path]`
//! wrote them ([`with_responses`]).
//!
//! The documents are written once, when the router is built. Two operations with one id are a
//! mistake of the program, not of the request: both routes then answer `500` with the reason,
//! and the rest of the service runs.

use std::sync::Arc;

use axum::Router;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use idem_runtime::Problem;
use idem_runtime::docs::{Documents, DuplicateOperation, MARKDOWN_PATH, OPENAPI_PATH, Operations};
use std::collections::BTreeMap;

use utoipa::openapi::OpenApi;
use utoipa::openapi::content::ContentBuilder;
use utoipa::openapi::header::HeaderBuilder;
use utoipa::openapi::response::{Response as ResponseDoc, ResponseBuilder};
use utoipa::openapi::schema::{ObjectBuilder, Type};
use utoipa::openapi::security::{HttpAuthScheme, HttpBuilder, SecurityScheme};
use utoipa::openapi::{Ref, RefOr};

/// The name of the bearer security scheme, as `security(("bearer" = []))` names it.
pub const BEARER: &str = "bearer";

/// `401`, as the example's routes describe it.
pub(crate) const UNAUTHENTICATED: &str = "No `Authorization: Bearer <tenant>`, or a tenant \
    that does not match `^[a-z0-9-]{1,64}$` (`urn:idem:example:unauthenticated`)";
/// `400` of a path parameter, as the example's routes describe it.
pub(crate) const INVALID_PATH: &str = "The path does not decode (`urn:idem:example:invalid-path`)";
/// `500` of the example's own queries.
pub(crate) const DATABASE_ERROR: &str =
    "The database failed (`urn:idem:problem:database-error`); nothing changed";
/// `503` of the example's own queries.
pub(crate) const DATABASE_UNAVAILABLE: &str = "The database is unavailable for now \
    (`urn:idem:problem:database-unavailable`); retry after `Retry-After`";

/// The problems every read of the examples can answer besides its own `404`: a path that
/// does not decode (`400`), no tenant (`401`), and the database's failures (`500`, and
/// `503` with `Retry-After`). `responses(…, ReadProblems)` in `#[utoipa::path]`.
#[derive(Debug, Clone, Copy)]
pub struct ReadProblems;

impl utoipa::IntoResponses for ReadProblems {
    fn responses() -> BTreeMap<String, RefOr<ResponseDoc>> {
        let problem = |description: &str| {
            ResponseBuilder::new().description(description).content(
                "application/problem+json",
                ContentBuilder::new()
                    .schema(Some(Ref::from_schema_name("Problem")))
                    .build(),
            )
        };
        let retry_after = HeaderBuilder::new()
            .schema(Some(
                ObjectBuilder::new()
                    .schema_type(Type::Integer)
                    .minimum(Some(1)),
            ))
            .description(Some("Seconds to wait before retrying"))
            .build();
        BTreeMap::from([
            ("400".to_owned(), problem(INVALID_PATH).build().into()),
            ("401".to_owned(), problem(UNAUTHENTICATED).build().into()),
            ("500".to_owned(), problem(DATABASE_ERROR).build().into()),
            (
                "503".to_owned(),
                problem(DATABASE_UNAVAILABLE)
                    .header("Retry-After", retry_after)
                    .build()
                    .into(),
            ),
        ])
    }
}

/// Adds the examples' bearer scheme to a document: `Authorization: Bearer <tenant>`.
#[derive(Debug, Clone, Copy)]
pub struct BearerScheme;

impl utoipa::Modify for BearerScheme {
    fn modify(&self, openapi: &mut OpenApi) {
        let scheme = HttpBuilder::new()
            .scheme(HttpAuthScheme::Bearer)
            .bearer_format("tenant")
            .description(Some(
                "A stand-in for real authentication: the token is the tenant, \
                 `^[a-z0-9-]{1,64}$`, and is not verified. Keys are unique per tenant.",
            ))
            .build();
        openapi
            .components
            .get_or_insert_with(Default::default)
            .add_security_scheme(BEARER, SecurityScheme::Http(scheme));
    }
}

/// `operations` with their own responses read from the example's document `api`
/// ([`Operations::responses_from`]): the Markdown document, and the documents
/// `register_docs` records for `idem docs`, list them as `#[utoipa::path]` wrote them.
#[must_use]
pub fn with_responses(operations: Operations, api: &OpenApi) -> Operations {
    // utoipa's document always serialises to JSON.
    operations.clone().responses_from(api).unwrap_or(operations)
}

/// The example's two documents: `api` (its own, from `utoipa`) with idem's contract of
/// `operations` merged in ([`Operations::documents_with`]), and the Markdown contract.
///
/// # Errors
/// When two operations have one id, or the document does not convert (the reason, for the
/// `500` the routes then answer).
pub fn documents(
    operations: Result<Operations, DuplicateOperation>,
    api: OpenApi,
) -> Result<Documents, String> {
    let operations = operations.map_err(|e| e.to_string())?;
    operations.documents_with(api).map_err(|e| e.to_string())
}

/// The routes serving both [`documents`] ([`Documents::routes`]), or answering `500` with
/// the reason they cannot be written.
pub fn routes<S: Clone + Send + Sync + 'static>(
    operations: Result<Operations, DuplicateOperation>,
    api: OpenApi,
) -> Router<S> {
    match documents(operations, api) {
        Ok(documents) => documents.routes(),
        Err(error) => {
            tracing::error!(%error, "the documents cannot be generated");
            let reason: Arc<str> = error.into();
            let failed = async move || unavailable(&reason);
            Router::new()
                .route(MARKDOWN_PATH, get(failed.clone()))
                .route(OPENAPI_PATH, get(failed))
        }
    }
}

fn unavailable(reason: &str) -> Response {
    Problem::new(
        StatusCode::INTERNAL_SERVER_ERROR,
        "urn:idem:example:docs-unavailable",
        "documentation unavailable",
    )
    .with_detail(reason)
    .into_response()
}
