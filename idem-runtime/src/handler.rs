//! The axum side of an idempotent handler: what the attribute's expansion extracts first
//! ([`Ctx`]), how the handler's own extractors reuse the principal ([`Reuse`]), and
//! [`run`], which drives the protocol around the handler and turns its outcome into a
//! response.
//!
//! - **The status decides success**: a response `>= 400` is a failure, rolled back and not
//!   stored ([`Record`](crate::protocol::Record)). That needs no knowledge of the handler's
//!   return type, so `Result`s and plain responses work alike.
//! - **The principal runs once.** For tenant and user scopes [`Ctx`] runs the state's
//!   `IdemState::Principal` extractor first and keeps its value in the request's
//!   extensions; every extractor of the handler is wrapped in [`Reuse`], which takes a value
//!   of its type from there before running its own extractor.
//! - **The key's answer comes before a refused body.** The last extractor is taken as
//!   [`Last`], which keeps its refusal: when idem's body extractor refused a JSON body and
//!   the key is in use by another request, the answer is that key's `422` naming the body
//!   fields that differ ([`refused`]), not the refusal.
//! - **The handler takes `&mut Transaction<'_, DB>`**: the transaction borrows a connection
//!   the execution holds, so that a failed `BEGIN` is cleaned up on that same connection.

use std::marker::PhantomData;
use std::sync::{Arc, Mutex, PoisonError};

use axum::extract::{FromRequest, FromRequestParts, Request};
use axum::response::{IntoResponse, Response};
use futures_util::future::BoxFuture;
use http::request::Parts;
use http::{HeaderValue, header};
use serde::Serialize;
use serde::de::DeserializeOwned;
use sqlx::Transaction;

use crate::error::Error;
use crate::extract::BodyLimit;
use crate::fingerprint::{self, DynInput, Fingerprint};
use crate::key::IdempotencyKey;
use crate::principal::{IdemState, scope_of};
use crate::problem::RefusedBody;
use crate::protocol::{Call, Idem};
use crate::record::Record;
use crate::resume::{CapturedBody, Resumption, StoredRequest};
use crate::spec::{KeyRequirement, OperationSpec, Scope, ScopeKind};
use crate::staged::{Attempt, Finished, StepError};
use crate::store::{Backend, KeyRef};
use crate::telemetry::Execution;

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

/// The request-side context of one idempotent handler, extracted before the handler's own
/// extractors: authenticates (for tenant and user scopes), reads the key header and sets the
/// body limit.
#[doc(hidden)]
#[derive(Debug)]
pub struct Ctx<DB: Backend, K: ScopeMarker> {
    idem: Idem<DB>,
    scope: Scope,
    key: Result<Option<IdempotencyKey>, Error>,
    request_id: Option<String>,
    _scope: PhantomData<K>,
}

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
            ScopeKind::Tenant | ScopeKind::User => {
                let principal = S::Principal::from_request_parts(parts, state)
                    .await
                    .map_err(IntoResponse::into_response)?;
                adopt(parts, K::KIND, principal).map_err(IntoResponse::into_response)?
            }
            _ => Scope::global(),
        };
        Ok(Self::with_scope(parts, idem, scope))
    }
}

/// The scope of `kind` that `principal` names; the principal is kept for the handler's own
/// argument of its type, which takes it from here ([`Reuse`]): authentication runs once per
/// request.
fn adopt<P>(parts: &mut Parts, kind: ScopeKind, principal: P) -> Result<Scope, Error>
where
    P: crate::principal::Principal + Send + 'static,
{
    let scope = scope_of(kind, &principal)?;
    parts.extensions.insert(Cached::new(principal));
    Ok(scope)
}

impl<DB: Backend, K: ScopeMarker> Ctx<DB, K> {
    /// The context once the scope is known: the key header, the body limit, the request id.
    fn with_scope(parts: &mut Parts, idem: Idem<DB>, scope: Scope) -> Self {
        parts
            .extensions
            .insert(BodyLimit(idem.config().max_request_body));
        let key = IdempotencyKey::from_headers(&parts.headers, idem.config().key_format)
            .map_err(Error::InvalidKey);
        Self {
            idem,
            scope,
            key,
            request_id: crate::telemetry::request_id_of(parts),
            _scope: PhantomData,
        }
    }
}

/// The parts of the request an operation's key is taken from (`key = header(…)`,
/// `body(…)`): its headers, and its body as the handler's body extractor reads it. Extracted
/// after the context and before the handler's own extractors; [`Ctx::key_from`] reads the
/// key once they all ran.
#[doc(hidden)]
#[derive(Debug)]
pub struct KeyParts {
    headers: http::HeaderMap,
    body: CapturedBody,
}

impl<S: Send + Sync> FromRequestParts<S> for KeyParts {
    type Rejection = std::convert::Infallible;

    async fn from_request_parts(parts: &mut Parts, _: &S) -> Result<Self, Self::Rejection> {
        // A staged handler's context keeps the body already: share its copy.
        let body = match parts.extensions.get::<CapturedBody>() {
            Some(body) => body.clone(),
            None => {
                let body = CapturedBody::default();
                parts.extensions.insert(body.clone());
                body
            }
        };
        Ok(Self {
            headers: parts.headers.clone(),
            body,
        })
    }
}

impl<DB: Backend, K: ScopeMarker> Ctx<DB, K> {
    /// The key of an operation that takes it from the request, in place of the
    /// `Idempotency-Key` header's.
    #[doc(hidden)]
    #[must_use]
    pub fn key_from(mut self, parts: KeyParts, spec: &OperationSpec) -> Self {
        let body = parts.body.peek();
        self.key = crate::key::from_parts(spec.key_source, &parts.headers, body.as_deref())
            .map_err(|e| Error::KeyFromRequest {
                from: spec.key_source,
                missing: e.missing,
                reason: e.reason,
            });
        self
    }
}

impl<DB: Backend, K: ScopeMarker> StagedCtx<DB, K> {
    /// [`Ctx::key_from`].
    #[doc(hidden)]
    #[must_use]
    pub fn key_from(mut self, parts: KeyParts, spec: &OperationSpec) -> Self {
        self.ctx = self.ctx.key_from(parts, spec);
        self
    }
}

/// The context of a staged handler ([`Ctx`]'s, and what resuming it needs): the request as
/// it will be stored with the key, or the [`Resumption`] the reconciler sent it with.
#[doc(hidden)]
#[derive(Debug)]
pub struct StagedCtx<DB: Backend, K: ScopeMarker> {
    ctx: Ctx<DB, K>,
    /// The stored request, less its body (captured by the body extractor).
    request: StoredRequest,
    body: CapturedBody,
    resumption: Option<Resumption>,
}

impl std::fmt::Debug for CapturedBody {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("CapturedBody")
    }
}

impl<S, DB, K> FromRequestParts<S> for StagedCtx<DB, K>
where
    S: IdemState<DB>,
    S::Principal: ResumablePrincipal,
    DB: Backend,
    K: ScopeMarker,
{
    type Rejection = Response;

    async fn from_request_parts(parts: &mut Parts, state: &S) -> Result<Self, Response> {
        let resumption = parts.extensions.remove::<Resumption>();
        let (ctx, principal_json) = match &resumption {
            Some(resumption) if K::KIND != ScopeKind::Global => {
                // No credentials come with a resumption: the principal stored with the key
                // stands for the one extracted then.
                let idem = state.idem().clone();
                let stored = resumption.with(|ticket| ticket.principal.clone());
                let principal = stored
                    .and_then(|value| serde_json::from_value::<S::Principal>(value).ok())
                    .ok_or_else(|| {
                        Error::Interrupted {
                            reason: "the stored principal does not read back".to_owned(),
                            retry_after: idem.config().retry_after,
                        }
                        .into_response()
                    })?;
                let scope =
                    adopt(parts, K::KIND, principal).map_err(IntoResponse::into_response)?;
                (Ctx::with_scope(parts, idem, scope), None)
            }
            _ => {
                let ctx = Ctx::from_request_parts(parts, state).await?;
                // The principal it extracted, stored with the key.
                let principal = parts.extensions.get::<Cached<S::Principal>>();
                let json = principal.and_then(|cached| cached.peek(|p| serde_json::to_value(p)));
                let json = json
                    .transpose()
                    .map_err(|error| Error::Journal(error).into_response())?;
                (ctx, json)
            }
        };
        let body = CapturedBody::default();
        parts.extensions.insert(body.clone());
        let request = StoredRequest::new(
            &parts.method,
            &parts.uri,
            parts.headers.get(header::CONTENT_TYPE),
            &[],
            principal_json,
        );
        Ok(Self {
            ctx,
            request,
            body,
            resumption,
        })
    }
}

/// What a staged handler's principal needs: to be stored with the key (serde), so that the
/// reconciler can resume the handler without the client's credentials.
#[diagnostic::on_unimplemented(
    message = "the principal `{Self}` cannot be stored with a staged key",
    label = "`IdemState::Principal` must implement `serde::Serialize` and `serde::Deserialize`",
    note = "a staged handler is resumed after a crash without its client: the identity the principal verified is stored with the key (never the credentials), so derive `Serialize` and `Deserialize` for it with the fields that name the tenant or user"
)]
pub trait ResumablePrincipal: Serialize + DeserializeOwned {}

/// (Not recommended: the error names `ResumablePrincipal`, whose note says why, rather than
/// `Serialize` alone.)
#[diagnostic::do_not_recommend]
impl<T: Serialize + DeserializeOwned> ResumablePrincipal for T {}

impl<DB: Backend, K: ScopeMarker> Ctx<DB, K> {
    /// The span and metrics of this request's execution of `spec`.
    fn execution(&self, spec: &OperationSpec) -> Execution {
        let key = self.key.as_ref().ok().and_then(Option::as_ref);
        Execution::start(
            spec.id,
            self.scope.as_str(),
            key.map(IdempotencyKey::as_str),
            self.request_id.as_deref(),
        )
    }
}

/// A value an earlier extractor of the same request already produced, kept in the request's
/// extensions for the next extractor of its type to take.
struct Cached<T>(Arc<Mutex<Option<T>>>);

impl<T> Clone for Cached<T> {
    fn clone(&self) -> Self {
        Self(Arc::clone(&self.0))
    }
}

impl<T> Cached<T> {
    fn new(value: T) -> Self {
        Self(Arc::new(Mutex::new(Some(value))))
    }

    fn take(&self) -> Option<T> {
        self.0.lock().unwrap_or_else(PoisonError::into_inner).take()
    }

    /// `f` of the value, if no extractor took it yet.
    fn peek<R>(&self, f: impl FnOnce(&T) -> R) -> Option<R> {
        self.0
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .as_ref()
            .map(f)
    }
}

/// One of the handler's extractors, as the expansion takes it: a value of its type that idem
/// extracted already for this request (the principal) is reused, otherwise the extractor
/// runs.
#[doc(hidden)]
#[derive(Debug)]
pub struct Reuse<T>(pub T);

impl<S, T> FromRequestParts<S> for Reuse<T>
where
    S: Send + Sync,
    T: FromRequestParts<S> + Send + 'static,
{
    type Rejection = T::Rejection;

    async fn from_request_parts(parts: &mut Parts, state: &S) -> Result<Self, T::Rejection> {
        if let Some(value) = parts.extensions.get::<Cached<T>>().and_then(Cached::take) {
            return Ok(Self(value));
        }
        T::from_request_parts(parts, state).await.map(Self)
    }
}

impl<S, T> FromRequest<S> for Reuse<T>
where
    S: Send + Sync,
    T: FromRequest<S> + 'static,
{
    type Rejection = Response;

    async fn from_request(req: Request, state: &S) -> Result<Self, Response> {
        // A staged handler's body is kept, as received, for the request stored with its key.
        let req = match req.extensions().get::<CapturedBody>().cloned() {
            Some(captured) => {
                // Read as idem's body extractors read it (every limit, problem+json
                // rejections), then handed on as it was.
                let (parts, body) = req.into_parts();
                let mut read = Request::new(body);
                read.headers_mut().clone_from(&parts.headers);
                read.extensions_mut().clone_from(&parts.extensions);
                let bytes = crate::extract::read_body(read)
                    .await
                    .map_err(IntoResponse::into_response)?;
                captured.set(bytes.clone());
                Request::from_parts(parts, axum::body::Body::from(bytes))
            }
            None => req,
        };
        T::from_request(req, state)
            .await
            .map(Self)
            .map_err(IntoResponse::into_response)
    }
}

/// The handler's last extractor, as the expansion takes it: as [`Reuse`], and its refusal
/// kept for [`refused`] rather than answered at once.
#[doc(hidden)]
#[derive(Debug)]
pub struct Last<T>(pub Result<T, Response>);

impl<S, T> FromRequestParts<S> for Last<T>
where
    S: Send + Sync,
    T: FromRequestParts<S> + Send + 'static,
{
    type Rejection = std::convert::Infallible;

    async fn from_request_parts(parts: &mut Parts, state: &S) -> Result<Self, Self::Rejection> {
        let value = Reuse::<T>::from_request_parts(parts, state).await;
        Ok(Self(
            value.map(|r| r.0).map_err(IntoResponse::into_response),
        ))
    }
}

impl<S, T> FromRequest<S> for Last<T>
where
    S: Send + Sync,
    T: FromRequest<S> + 'static,
{
    type Rejection = std::convert::Infallible;

    async fn from_request(req: Request, state: &S) -> Result<Self, Self::Rejection> {
        Ok(Self(
            Reuse::<T>::from_request(req, state).await.map(|r| r.0),
        ))
    }
}

/// The context of either mode, for [`refused`].
#[doc(hidden)]
pub trait AnyCtx<DB: Backend, K: ScopeMarker> {
    /// The context proper.
    fn ctx(self) -> Ctx<DB, K>;
}

impl<DB: Backend, K: ScopeMarker> AnyCtx<DB, K> for Ctx<DB, K> {
    fn ctx(self) -> Ctx<DB, K> {
        self
    }
}

impl<DB: Backend, K: ScopeMarker> AnyCtx<DB, K> for StagedCtx<DB, K> {
    fn ctx(self) -> Ctx<DB, K> {
        self.ctx
    }
}

/// The answer to a request whose last extractor refused it: the refusal, unless idem's body
/// extractor refused a JSON body under a key another request is using. Then the key's
/// answer comes first: `422 key-reused` naming the body fields that differ
/// ([`Idem::refused_mismatch`](crate::protocol::Idem)), as a valid body would have got.
#[doc(hidden)]
pub async fn refused<DB, K>(
    ctx: impl AnyCtx<DB, K>,
    spec: &'static OperationSpec,
    refusal: Response,
) -> Response
where
    DB: Backend,
    K: ScopeMarker,
{
    let ctx = ctx.ctx();
    let body = refusal.extensions().get::<RefusedBody>().cloned();
    let (Some(RefusedBody(body)), Ok(Some(key))) = (body, &ctx.key) else {
        return refusal;
    };
    let key_ref = KeyRef {
        scope: ctx.scope.as_str(),
        operation: spec.id,
        key: key.as_str(),
    };
    match ctx.idem.refused_mismatch(spec, key_ref, &body).await {
        Some(mismatch) => rejected(
            ctx.execution(spec),
            Error::Mismatch(Some(Box::new(mismatch))),
        ),
        None => refusal,
    }
}

/// A request's fingerprint, and the canonical request it is of (for the field digests a
/// `422` names fields with, [`crate::fields`]).
#[doc(hidden)]
#[derive(Debug)]
pub struct Fingerprinted {
    fingerprint: Fingerprint,
    canonical: Vec<u8>,
}

/// Fingerprints the handler's input parts (the expansion's first step after extraction).
#[doc(hidden)]
pub fn fingerprint(spec: &OperationSpec, parts: &[&dyn DynInput]) -> Result<Fingerprinted, Error> {
    let (fingerprint, canonical) =
        fingerprint::of_parts_kept(spec.id, parts, spec.fingerprint_exclude)
            .map_err(Error::Input)?;
    Ok(Fingerprinted {
        fingerprint,
        canonical,
    })
}

/// The handler, bound to its arguments, waiting for the transaction.
#[doc(hidden)]
pub type Handler<'t> = BoxFuture<'t, Response>;

/// Runs one idempotent request: the whole protocol around the handler.
#[doc(hidden)]
pub async fn run<DB, K, F>(
    ctx: Ctx<DB, K>,
    spec: &'static OperationSpec,
    fingerprint: Result<Fingerprinted, Error>,
    handler: F,
) -> Response
where
    DB: Backend,
    K: ScopeMarker,
    F: for<'t, 'c> FnOnce(&'t mut Transaction<'c, DB>) -> Handler<'t> + Send + 'static,
{
    let execution = ctx.execution(spec);
    let span = execution.span().clone();
    let key = match ctx.key {
        Ok(key) => key,
        Err(error) => return rejected(execution, error),
    };
    let limit = ctx.idem.config().max_response_body;
    let work = crate::protocol::work_fn(move |tx: &mut Transaction<'_, DB>| {
        Box::pin(async move { capture(handler(tx).await, limit).await })
    });
    let outcome = match key {
        None if spec.key == KeyRequirement::Required => {
            return rejected(execution, Error::MissingKey);
        }
        None => execution.run(ctx.idem.execute_unkeyed(work)).await,
        Some(key) => {
            let fingerprint = match fingerprint {
                Ok(fingerprint) => fingerprint,
                Err(error) => return rejected(execution, error),
            };
            let call = Call {
                scope: ctx.scope.as_str(),
                key: &key,
                fingerprint: fingerprint.fingerprint,
                request: spec.mismatch_detail.then_some(&fingerprint.canonical[..]),
            };
            execution
                .run(ctx.idem.execute_untraced(spec, call, work))
                .await
        }
    };
    // idem's error lines carry the span's fields.
    span.in_scope(|| outcome.into_response())
}

/// The answer to a request refused before the protocol, recorded as such.
fn rejected(execution: Execution, error: Error) -> Response {
    let refused = Err(error);
    let span = execution.span().clone();
    execution.finish(&refused);
    span.in_scope(|| refused.into_response())
}

/// What the expansion of a staged handler calls: reads the key, stores the request with it
/// (see [`crate::resume`]) and runs the handler through the staged protocol — or, for a
/// request the [`Reconciler`](crate::staged::Reconciler) sent, resumes the attempt it took
/// over.
///
/// The attempt runs on a task of its own: a client that hangs up does not abandon it midway
/// (it would only be resumed once its lease ran out).
#[doc(hidden)]
pub async fn run_staged<DB, K, F>(
    ctx: StagedCtx<DB, K>,
    spec: &'static OperationSpec,
    fingerprint: Result<Fingerprinted, Error>,
    handler: F,
) -> Response
where
    DB: Backend,
    K: ScopeMarker,
    F: FnOnce(Attempt<DB>) -> BoxFuture<'static, Result<Finished, StepError>> + Send + 'static,
{
    let StagedCtx {
        ctx,
        mut request,
        body,
        resumption,
    } = ctx;
    // (With the lease the configuration sets for it, if any.)
    let spec = ctx.idem.config().spec(spec);
    if let Some(resumption) = resumption {
        return resume(ctx.idem, &spec, &resumption, handler).await;
    }
    let execution = ctx.execution(&spec);
    let span = execution.span().clone();
    let key = match ctx.key {
        Ok(Some(key)) => key,
        Ok(None) => return rejected(execution, Error::MissingKey),
        Err(error) => return rejected(execution, error),
    };
    let fingerprint = match fingerprint {
        Ok(fingerprint) => fingerprint,
        Err(error) => return rejected(execution, error),
    };
    let body = body.take();
    request.set_body(&body);
    let request = match serde_json::to_string(&request) {
        Ok(request) => request,
        Err(error) => return rejected(execution, Error::Journal(error)),
    };
    let idem = ctx.idem;
    let scope = ctx.scope;
    let attempt = tokio::spawn(async move {
        let call = Call {
            scope: scope.as_str(),
            key: &key,
            fingerprint: fingerprint.fingerprint,
            request: spec.mismatch_detail.then_some(&fingerprint.canonical[..]),
        };
        let staged = idem.staged_untraced(&spec, call, &request, handler);
        execution.run(staged).await
    });
    let outcome = attempt.await.unwrap_or(Err(Error::Panicked));
    span.in_scope(|| outcome.into_response())
}

/// A staged handler entered by the reconciler: runs the attempt it took over, and leaves the
/// outcome in the ticket.
async fn resume<DB, F>(
    idem: Idem<DB>,
    spec: &OperationSpec,
    resumption: &Resumption,
    handler: F,
) -> Response
where
    DB: Backend,
    F: FnOnce(Attempt<DB>) -> BoxFuture<'static, Result<Finished, StepError>> + Send + 'static,
{
    let (scope, operation, key, lease) = resumption.with(|ticket| {
        (
            ticket.scope.clone(),
            ticket.operation.clone(),
            ticket.key.clone(),
            ticket.lease.take(),
        )
    });
    let outcome = match lease {
        Some(lease) if operation == spec.id => {
            let execution = Execution::resumption(spec.id, &scope, &key);
            let key = crate::store::KeyRef {
                scope: &scope,
                operation: spec.id,
                key: &key,
            };
            execution
                .run(idem.run_attempt(spec, key, lease, true, handler))
                .await
        }
        _ => Err(Error::Interrupted {
            reason: format!(
                "the stored request of `{operation}` reached the handler of `{}`",
                spec.id
            ),
            retry_after: idem.config().retry_after,
        }),
    };
    let response = match &outcome {
        Ok(outcome) => outcome.record.status.into_response(),
        Err(error) => error.problem().status().into_response(),
    };
    resumption.with(|ticket| ticket.outcome = Some(outcome));
    response
}

/// Pins a staged handler's return type, so that another type is reported at it.
#[doc(hidden)]
pub fn staged_result(result: Result<Finished, StepError>) -> Result<Finished, StepError> {
    result
}

/// Buffers a response into a [`Record`]. A body over `limit` becomes a `500` record, which
/// rolls the transaction back.
pub(crate) async fn capture(response: Response, limit: usize) -> Record {
    let (parts, body) = response.into_parts();
    match axum::body::to_bytes(body, limit).await {
        Ok(body) => Record {
            status: parts.status,
            headers: parts.headers,
            body,
        },
        Err(_) => {
            let error = Error::ResponseTooLarge { limit };
            tracing::error!(%error, "response not stored");
            let problem = error.problem();
            let mut headers = http::HeaderMap::new();
            headers.insert(
                header::CONTENT_TYPE,
                HeaderValue::from_static(crate::problem::CONTENT_TYPE),
            );
            Record {
                status: problem.status(),
                headers,
                body: serde_json::to_vec(&problem).unwrap_or_default().into(),
            }
        }
    }
}
