//! The application `http.rs` and `inputs.rs` serve in process (`tower::ServiceExt::oneshot`):
//! its state, its principal, a custom input, the business write its handlers make, and
//! requests through its router with their replies. Each file adds its own handlers and routes.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use axum::Router;
use axum::body::Body;
use axum::extract::FromRequestParts;
use axum::http::request::Parts;
use axum::http::{HeaderMap, Request, StatusCode, header};
use http_body_util::BodyExt as _;
use idem_runtime::fingerprint::{FingerprintError, InputWriter, part};
use idem_runtime::sqlx::Transaction;
use idem_runtime::{Config, Idem, IdemState, Input, Principal};
use tower::ServiceExt as _;

use super::{Harness, TestDb};

/// The router's state; `auth_runs` counts the principal extractor's runs (per test).
#[derive(Debug)]
pub struct App<DB: TestDb> {
    pub idem: Idem<DB>,
    pub auth_runs: Arc<AtomicUsize>,
}

impl<DB: TestDb> Clone for App<DB> {
    fn clone(&self) -> Self {
        Self {
            idem: self.idem.clone(),
            auth_runs: Arc::clone(&self.auth_runs),
        }
    }
}

impl<DB: TestDb> IdemState<DB> for App<DB> {
    type Principal = Caller;
    fn idem(&self) -> &Idem<DB> {
        &self.idem
    }
}

/// `x-tenant` / `x-user` headers: a stand-in for an authenticating extractor, which counts
/// its runs in the state.
#[derive(Debug)]
pub struct Caller {
    pub tenant: Option<String>,
    pub user: Option<String>,
}

impl<DB: TestDb> FromRequestParts<App<DB>> for Caller {
    type Rejection = StatusCode;
    async fn from_request_parts(parts: &mut Parts, state: &App<DB>) -> Result<Self, StatusCode> {
        state.auth_runs.fetch_add(1, Ordering::SeqCst);
        let get = |name: &str| {
            parts
                .headers
                .get(name)
                .and_then(|v| v.to_str().ok())
                .map(str::to_owned)
        };
        match (get("x-tenant"), get("x-user")) {
            (None, None) => Err(StatusCode::UNAUTHORIZED),
            (tenant, user) => Ok(Self { tenant, user }),
        }
    }
}

impl Principal for Caller {
    fn tenant(&self) -> Option<&str> {
        self.tenant.as_deref()
    }
    fn user(&self) -> Option<&str> {
        self.user.as_deref()
    }
}

/// A custom input of the query part: the `x-amount` header.
pub struct Amount(pub u32);

impl<S: Send + Sync> FromRequestParts<S> for Amount {
    type Rejection = StatusCode;
    async fn from_request_parts(parts: &mut Parts, _: &S) -> Result<Self, StatusCode> {
        parts
            .headers
            .get("x-amount")
            .and_then(|v| v.to_str().ok()?.parse().ok())
            .map(Amount)
            .ok_or(StatusCode::BAD_REQUEST)
    }
}

impl Input for Amount {
    type Part = part::Query;
    fn write(&self, out: InputWriter<'_>) -> Result<(), FingerprintError> {
        out.value(&self.0)
    }
}

/// The handlers' business write, in the key's transaction.
pub async fn effect<DB: TestDb>(tx: &mut Transaction<'_, DB>, note: &str) {
    DB::write_effect(&mut **tx, note).await;
}

/// A store on a fresh database and the application's state on it.
pub struct Setup<DB: TestDb> {
    pub h: Harness<DB>,
    pub state: App<DB>,
}

impl<DB: TestDb> Setup<DB> {
    pub async fn new(config: Config) -> Self {
        let h = Harness::<DB>::with_config(config).await;
        let state = App {
            idem: h.idem.clone(),
            auth_runs: Arc::new(AtomicUsize::new(0)),
        };
        Self { h, state }
    }

    /// `routes` on this state.
    pub fn router(&self, routes: Router<App<DB>>) -> Router {
        routes.with_state(self.state.clone())
    }

    pub fn auth_runs(&self) -> usize {
        self.state.auth_runs.load(Ordering::SeqCst)
    }

    pub async fn effects_and_keys(&self) -> (i64, i64) {
        (self.h.effects().await, self.h.keys().await)
    }
}

/// A response, read whole.
#[derive(Debug)]
pub struct Reply {
    pub status: StatusCode,
    pub headers: HeaderMap,
    pub body: String,
}

impl Reply {
    pub fn replayed(&self) -> bool {
        self.headers
            .get(idem_runtime::REPLAYED_HEADER)
            .is_some_and(|v| v == "true")
    }

    /// Asserts a problem+json answer of `status`; the problem.
    #[track_caller]
    pub fn problem_json(&self, status: StatusCode) -> serde_json::Value {
        assert_eq!(self.status, status, "{}", self.body);
        assert_eq!(
            self.headers[header::CONTENT_TYPE],
            "application/problem+json",
            "{}",
            self.body
        );
        serde_json::from_str(&self.body).unwrap()
    }

    /// Asserts a problem+json answer of `status` and `type_uri`; the problem.
    #[track_caller]
    pub fn problem(&self, status: StatusCode, type_uri: &str) -> serde_json::Value {
        let problem = self.problem_json(status);
        assert_eq!(problem["type"], type_uri, "{}", self.body);
        assert_eq!(problem["status"], status.as_u16());
        problem
    }

    #[track_caller]
    pub fn created(&self) -> &Self {
        assert_eq!(self.status, StatusCode::CREATED, "{}", self.body);
        assert!(!self.replayed());
        self
    }

    #[track_caller]
    pub fn replay_of(&self, first: &Self) {
        assert_eq!(self.status, first.status, "{}", self.body);
        assert!(self.replayed(), "not a replay: {self:?}");
        assert_eq!(self.body, first.body);
    }
}

/// `request` through `router`.
pub async fn call(router: &Router, request: Request<Body>) -> Reply {
    let response = router.clone().oneshot(request).await.unwrap();
    let (parts, body) = response.into_parts();
    Reply {
        status: parts.status,
        headers: parts.headers,
        body: String::from_utf8(body.collect().await.unwrap().to_bytes().to_vec()).unwrap(),
    }
}

/// A POST with a JSON content type, the given headers and a body of known length.
pub async fn send(router: &Router, uri: &str, headers: &[(&str, &str)], body: &str) -> Reply {
    let mut request = Request::post(uri).header("content-type", "application/json");
    for (name, value) in headers {
        request = request.header(*name, *value);
    }
    call(router, request.body(Body::from(body.to_owned())).unwrap()).await
}
