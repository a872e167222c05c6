//! A custom extractor that is neither an `Input` nor marked `#[not_input]`.

use axum::Router;
use axum::extract::FromRequestParts;
use axum::http::StatusCode;
use axum::http::request::Parts;
use axum::routing::post;
use idem_runtime::sqlx::{Sqlite, Transaction};
use idem_runtime::{Anonymous, Idem, IdemState, idempotent};

#[derive(Clone)]
struct AppState {
    idem: Idem<Sqlite>,
}

impl IdemState<Sqlite> for AppState {
    type Principal = Anonymous;
    fn idem(&self) -> &Idem<Sqlite> {
        &self.idem
    }
}

/// The caller's preferred language, read from a header.
struct Locale(String);

impl<S: Send + Sync> FromRequestParts<S> for Locale {
    type Rejection = StatusCode;

    async fn from_request_parts(parts: &mut Parts, _state: &S) -> Result<Self, StatusCode> {
        let locale = parts
            .headers
            .get("accept-language")
            .and_then(|v| v.to_str().ok());
        Ok(Self(locale.unwrap_or("en").to_owned()))
    }
}

#[idempotent(scope = "global")]
async fn create_order(locale: Locale, tx: &mut Transaction<'_, Sqlite>) -> String {
    let _ = tx;
    locale.0
}

fn main() {
    let _: fn(Idem<Sqlite>) -> Router = |idem| {
        Router::new()
            .route("/orders", post(create_order))
            .with_state(AppState { idem })
    };
}
