//! The axum side: extractors, response capture and replay. The macro's expansion calls
//! [`run`]; everything here is also usable by hand.

use std::marker::PhantomData;

use axum::body::Body;
use axum::extract::{FromRequest, FromRequestParts, Request};
use axum::response::{IntoResponse, Response};
use futures_util::future::BoxFuture;
use http::request::Parts;
use http::{HeaderValue, StatusCode, header};
use http_body_util::{BodyExt as _, LengthLimitError, Limited};
use serde::de::DeserializeOwned;
use sqlx::Transaction;

use crate::error::Error;
use crate::fingerprint::{self, DynInput};
use crate::idem::{Call, Idem, OutcomeKind};
use crate::key::{self, IdempotencyKey, KeyError};
use crate::problem::Problem;
use crate::spec::{KeyRequirement, OperationSpec, ScopeKind};
use crate::store::{Backend, Record};

/// Response header set on every replay.
pub const REPLAYED_HEADER: &str = "idempotent-replayed";

/// The authenticated caller, as the application's own auth extractor knows it.
///
/// `scope = "tenant"` keys by [`Principal::tenant`] and `scope = "user"` by
/// [`Principal::user`]. idem never reads a tenant from a client-supplied header: the value
/// comes from whatever your extractor verified (a session, a JWT, mTLS …).
pub trait Principal {
    /// The tenant the caller acts for.
    fn tenant(&self) -> Option<&str> {
        None
    }
    /// The caller's user id.
    fn user(&self) -> Option<&str> {
        None
    }
}

/// A principal for applications whose operations are all `scope = "global"`.
#[derive(Debug, Clone, Copy, Default)]
pub struct Anonymous;

impl Principal for Anonymous {}

impl<S: Send + Sync> FromRequestParts<S> for Anonymous {
    type Rejection = std::convert::Infallible;
    async fn from_request_parts(_: &mut Parts, _: &S) -> Result<Self, Self::Rejection> {
        Ok(Self)
    }
}

/// What an axum application state provides to idempotent handlers.
///
/// ```
/// use idem_runtime::{Anonymous, Idem, IdemState};
/// use sqlx::Sqlite;
///
/// #[derive(Clone)]
/// struct AppState {
///     idem: Idem<Sqlite>,
/// }
///
/// impl IdemState<Sqlite> for AppState {
///     type Principal = Anonymous; // or your auth extractor, for tenant/user scopes
///     fn idem(&self) -> &Idem<Sqlite> {
///         &self.idem
///     }
/// }
/// ```
pub trait IdemState<DB: Backend>: Send + Sync + Sized + 'static {
    /// The application's authenticated extractor. Its rejection (say `401`) is answered
    /// before idem looks at the key.
    type Principal: Principal + FromRequestParts<Self> + Send;
    /// The store handle.
    fn idem(&self) -> &Idem<DB>;
}

/// Compile-time scope, chosen by the attribute.
#[doc(hidden)]
pub trait ScopeMarker: Send + Sync + 'static {
    const KIND: ScopeKind;
}

macro_rules! scope_markers {
    ($($name:ident => $kind:ident),*) => {$(
        #[doc(hidden)]
        #[derive(Debug)]
        pub struct $name;
        impl ScopeMarker for $name {
            const KIND: ScopeKind = ScopeKind::$kind;
        }
    )*};
}
scope_markers!(GlobalScope => Global, TenantScope => Tenant, UserScope => User);

/// The request-side context of one idempotent handler: extracted first, before the
/// handler's own extractors. Authenticates (for tenant and user scopes), reads the key
/// header and tells [`Json`] the body limit.
#[doc(hidden)]
#[derive(Debug)]
pub struct Ctx<DB: Backend, K: ScopeMarker> {
    idem: Idem<DB>,
    scope: String,
    key: Result<Option<IdempotencyKey>, KeyError>,
    _scope: PhantomData<K>,
}

/// The request body limit [`Json`] applies, set by idempotent handlers' context.
#[derive(Debug, Clone, Copy)]
pub struct BodyLimit(pub usize);

impl<S, DB, K> FromRequestParts<S> for Ctx<DB, K>
where
    S: IdemState<DB>,
    DB: Backend,
    K: ScopeMarker,
{
    type Rejection = Response;

    async fn from_request_parts(parts: &mut Parts, state: &S) -> Result<Self, Response> {
        let idem = state.idem().clone();
        let scope = match K::KIND {
            ScopeKind::Global => ScopeKind::Global.as_str().to_owned(),
            kind => {
                let principal = S::Principal::from_request_parts(parts, state)
                    .await
                    .map_err(IntoResponse::into_response)?;
                let owner = match kind {
                    ScopeKind::Tenant => principal.tenant(),
                    _ => principal.user(),
                };
                let owner = owner.ok_or_else(|| Error::NoScope(kind.as_str()).into_response())?;
                Call::scope_value(kind, Some(owner))
            }
        };
        parts
            .extensions
            .insert(BodyLimit(idem.config().max_request_body));
        let mut values = parts.headers.get_all(key::HEADER).iter();
        let key = match (values.next(), values.next()) {
            (None, _) => Ok(None),
            (Some(_), Some(_)) => Err(KeyError::Repeated),
            (Some(raw), None) => {
                IdempotencyKey::parse(raw.as_bytes(), idem.config().key_format).map(Some)
            }
        };
        Ok(Self {
            idem,
            scope,
            key,
            _scope: PhantomData,
        })
    }
}

/// Fingerprints the handler's input parts (the expansion's first step after extraction).
#[doc(hidden)]
pub fn fingerprint(
    spec: &OperationSpec,
    parts: &[&dyn DynInput],
) -> Result<crate::Fingerprint, Error> {
    fingerprint::of_parts(spec.id, parts, spec.fingerprint_exclude).map_err(Error::Input)
}

/// The handler, bound to its arguments, waiting for the transaction.
#[doc(hidden)]
pub type Handler<'t> = BoxFuture<'t, Response>;

/// Runs one idempotent request: the whole protocol around the handler.
#[doc(hidden)]
pub async fn run<DB, K, F>(
    ctx: Ctx<DB, K>,
    spec: &'static OperationSpec,
    fingerprint: Result<crate::Fingerprint, Error>,
    handler: F,
) -> Response
where
    DB: Backend,
    K: ScopeMarker,
    F: for<'t, 'c> FnOnce(&'t mut Transaction<'c, DB>) -> Handler<'t> + Send + 'static,
{
    let key = match ctx.key {
        Ok(key) => key,
        Err(error) => return Error::InvalidKey(error).into_response(),
    };
    let limit = ctx.idem.config().max_response_body;
    let work = crate::idem::work_fn(move |tx: &mut Transaction<'_, DB>| {
        Box::pin(async move { capture(handler(tx).await, limit).await })
    });
    let outcome = match key {
        None if spec.key == KeyRequirement::Required => return Error::MissingKey.into_response(),
        None => ctx.idem.execute_unkeyed(work).await,
        Some(key) => {
            let fingerprint = match fingerprint {
                Ok(fingerprint) => fingerprint,
                Err(error) => return error.into_response(),
            };
            let call = Call {
                scope: &ctx.scope,
                key: &key,
                fingerprint,
            };
            ctx.idem.execute(spec, call, work).await
        }
    };
    match outcome {
        Ok(outcome) => {
            let replayed = outcome.kind == OutcomeKind::Replayed;
            let mut response = into_response(outcome.record);
            if replayed {
                response
                    .headers_mut()
                    .insert(REPLAYED_HEADER, HeaderValue::from_static("true"));
            }
            response
        }
        Err(error) => error.into_response(),
    }
}

/// Buffers a response into a [`Record`]. A body over `limit` becomes a `500` record, which
/// rolls the transaction back.
pub async fn capture(response: Response, limit: usize) -> Record {
    let (parts, body) = response.into_parts();
    match axum::body::to_bytes(body, limit).await {
        Ok(body) => Record {
            status: parts.status.as_u16(),
            headers: parts.headers,
            body,
        },
        Err(_) => {
            let error = Error::ResponseTooLarge { limit };
            tracing::error!(%error, "response not stored");
            let problem = error.problem();
            Record {
                status: problem.status().as_u16(),
                headers: problem_headers(),
                body: serde_json::to_vec(&problem).unwrap_or_default().into(),
            }
        }
    }
}

fn problem_headers() -> http::HeaderMap {
    let mut headers = http::HeaderMap::new();
    headers.insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static(crate::problem::CONTENT_TYPE),
    );
    headers
}

/// Turns a record back into a response.
#[must_use]
pub fn into_response(record: Record) -> Response {
    let mut response = Response::new(Body::from(record.body));
    *response.status_mut() =
        StatusCode::from_u16(record.status).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
    *response.headers_mut() = record.headers;
    response
}

/// Checks an input after it was deserialised. Its error is answered as is (make it `422`).
///
/// ```
/// use axum::http::StatusCode;
/// use idem_runtime::{Problem, Validate};
///
/// #[derive(serde::Deserialize)]
/// struct NewOrder { quantity: u32 }
///
/// impl Validate for NewOrder {
///     fn validate(&self) -> Result<(), Problem> {
///         if (1..=20).contains(&self.quantity) {
///             return Ok(());
///         }
///         Err(Problem::new(StatusCode::UNPROCESSABLE_ENTITY, "urn:shop:quantity", "invalid quantity"))
///     }
/// }
/// ```
pub trait Validate {
    /// `Ok` when the input is acceptable. The default accepts everything.
    ///
    /// # Errors
    /// The problem to answer with.
    fn validate(&self) -> Result<(), Problem> {
        Ok(())
    }
}

/// A JSON body extractor whose every rejection is `application/problem+json`, that honours
/// idem's request body limit ([`crate::Config::max_request_body`], `413` beyond it) and that
/// runs [`Validate`] before the handler — so invalid input never reaches the store.
#[derive(Debug, Clone, Copy, Default)]
pub struct Json<T>(pub T);

const DEFAULT_BODY_LIMIT: usize = 64 * 1024;

impl<S, T> FromRequest<S> for Json<T>
where
    S: Send + Sync,
    T: DeserializeOwned + Validate,
{
    type Rejection = Problem;

    async fn from_request(req: Request, _state: &S) -> Result<Self, Problem> {
        let json_content = req
            .headers()
            .get(header::CONTENT_TYPE)
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.split(';').next())
            .is_some_and(|mime| {
                let mime = mime.trim().to_ascii_lowercase();
                mime == "application/json" || mime.ends_with("+json")
            });
        if !json_content {
            return Err(Problem::new(
                StatusCode::UNSUPPORTED_MEDIA_TYPE,
                "urn:idem:problem:unsupported-media-type",
                "expected application/json",
            )
            .with_detail("send the body with `Content-Type: application/json`"));
        }
        let limit = req
            .extensions()
            .get::<BodyLimit>()
            .map_or(DEFAULT_BODY_LIMIT, |l| l.0);
        let too_large = || {
            Problem::new(
                StatusCode::PAYLOAD_TOO_LARGE,
                "urn:idem:problem:body-too-large",
                "request body too large",
            )
            .with_detail(format!("the body may be at most {limit} bytes"))
        };
        let declared = req
            .headers()
            .get(header::CONTENT_LENGTH)
            .and_then(|v| v.to_str().ok()?.parse::<u64>().ok());
        if declared.is_some_and(|n| n > limit as u64) {
            return Err(too_large());
        }
        let bytes = match Limited::new(req.into_body(), limit).collect().await {
            Ok(collected) => collected.to_bytes(),
            Err(error) if error.downcast_ref::<LengthLimitError>().is_some() => {
                return Err(too_large());
            }
            Err(_) => {
                return Err(Problem::new(
                    StatusCode::BAD_REQUEST,
                    "urn:idem:problem:body-unreadable",
                    "request body could not be read",
                ));
            }
        };
        let value: T = serde_json::from_slice(&bytes).map_err(|error| {
            let (status, type_uri) = match error.classify() {
                serde_json::error::Category::Data => (
                    StatusCode::UNPROCESSABLE_ENTITY,
                    "urn:idem:problem:invalid-body",
                ),
                _ => (StatusCode::BAD_REQUEST, "urn:idem:problem:malformed-json"),
            };
            Problem::new(status, type_uri, "invalid request body").with_detail(error.to_string())
        })?;
        value.validate()?;
        Ok(Self(value))
    }
}
