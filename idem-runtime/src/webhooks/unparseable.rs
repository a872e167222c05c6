//! A delivery that verifies but does not read: kept in the inbox as `unparseable`
//! ([`WebhookSecret::keep_unparseable`](super::WebhookSecret::keep_unparseable)), beside the
//! request path. [`Verified`](super::Verified) hands a refusal of its extractor here and
//! answers what comes back: the refusal itself once the delivery is kept, `503` (deliver it
//! again) when it could not be.

use std::fmt;
use std::sync::Arc;

use axum::body::Body;
use axum::response::{IntoResponse, Response};
use futures_util::future::BoxFuture;
use http::HeaderMap;
use serde::Deserialize;

use crate::error::Error;
use crate::protocol::Idem;
use crate::store::{Backend, Delivery};

/// The most of a refusal's body read for its reason: idem's problems are far smaller.
const REFUSAL_READ: usize = 64 * 1024;

/// The problem types whose detail names no value of the request: idem's own.
const VALUE_FREE_DETAILS: &str = "urn:idem:problem:";

/// The inbox a receiver keeps its unparseable deliveries in, and the source it notes them
/// from. Cheap to clone.
#[derive(Clone)]
pub(super) struct Keeper {
    source: Arc<str>,
    inbox: Arc<dyn KeepDelivery>,
}

impl fmt::Debug for Keeper {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "unparseable kept from {}", self.source)
    }
}

impl Keeper {
    /// Keeps in `idem`'s inbox, from `source`.
    pub(super) fn new<DB: Backend>(idem: &Idem<DB>, source: &str) -> Self {
        Self {
            source: source.into(),
            inbox: Arc::new(idem.clone()),
        }
    }
}

/// An [`Idem`] of any store, as a [`Keeper`] holds it.
trait KeepDelivery: Send + Sync {
    /// [`Idem::unparseable`].
    fn keep<'a>(&'a self, delivery: Delivery<'a>) -> BoxFuture<'a, Result<(), sqlx::Error>>;
}

impl<DB: Backend> KeepDelivery for Idem<DB> {
    fn keep<'a>(&'a self, delivery: Delivery<'a>) -> BoxFuture<'a, Result<(), sqlx::Error>> {
        Box::pin(self.unparseable(delivery))
    }
}

/// The answer to a delivery whose signature verified (`headers`, `body`) and whose body the
/// receiver's extractor refused with `refusal`. A refusal `4xx` is kept by `keeper` and then
/// answered as it is (the sender learns that its event does not read; nothing is lost if it
/// gives up); when it cannot be kept, `503` `store-unavailable` with `Retry-After` asks the
/// sender to deliver it again. Without a keeper, or for a refusal that is not the body's
/// (`5xx`), the refusal stands alone.
pub(super) async fn refused(
    keeper: Option<&Keeper>,
    headers: &HeaderMap,
    body: &[u8],
    refusal: Response,
) -> Response {
    if !refusal.status().is_client_error() {
        return refusal;
    }
    let Some(keeper) = keeper else {
        tracing::warn!(
            status = refusal.status().as_u16(),
            "a signed event whose body does not read is refused, and not kept: its secret \
             names no inbox (WebhookSecret::keep_unparseable)"
        );
        return refusal;
    };
    let event_id = headers
        .get(super::HEADER_WEBHOOK_ID)
        .and_then(|id| id.to_str().ok())
        .unwrap_or_default();
    let (refusal, reason) = reason(refusal).await;
    let body = String::from_utf8_lossy(body);
    let delivery = Delivery {
        source: &keeper.source,
        event_id,
        reason: &reason,
        body: &body,
    };
    match keeper.inbox.keep(delivery).await {
        Ok(()) => refusal,
        Err(error) => {
            tracing::error!(
                %error,
                source = &*keeper.source,
                "a signed event whose body does not read could not be kept; its sender is \
                 asked to deliver it again"
            );
            Error::Store(error).into_response()
        }
    }
}

/// What a problem+json refusal says, as far as the reason uses it.
#[derive(Deserialize)]
struct Said {
    #[serde(rename = "type")]
    type_uri: Option<String>,
    detail: Option<String>,
}

/// The refusal, to answer as it was, and the reason kept with the event: its status, its
/// problem type, and the detail of idem's own problems only (which names no value of the
/// request: an application's extractor may quote one).
async fn reason(refusal: Response) -> (Response, String) {
    let (parts, body) = refusal.into_parts();
    let bytes = axum::body::to_bytes(body, REFUSAL_READ)
        .await
        .unwrap_or_default();
    let said = serde_json::from_slice::<Said>(&bytes).ok();
    let reason = reason_of(parts.status, said);
    (Response::from_parts(parts, Body::from(bytes)), reason)
}

/// [`reason`]'s words.
fn reason_of(status: http::StatusCode, said: Option<Said>) -> String {
    let mut reason = format!(
        "the body does not read as the receiver's event: {}",
        status.as_u16()
    );
    let Some(Said { type_uri, detail }) = said else {
        return reason;
    };
    if let Some(type_uri) = type_uri {
        reason.push(' ');
        reason.push_str(&type_uri);
        if let Some(detail) = detail.filter(|_| type_uri.starts_with(VALUE_FREE_DETAILS)) {
            reason.push_str(": ");
            reason.push_str(&detail);
        }
    }
    reason
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::problem::Problem;
    use http::StatusCode;

    async fn reason_for(refusal: Response) -> String {
        let (answered, reason) = reason(refusal).await;
        let body = axum::body::to_bytes(answered.into_body(), REFUSAL_READ)
            .await
            .unwrap();
        assert!(!body.is_empty(), "the refusal is answered as it was");
        reason
    }

    #[tokio::test]
    async fn reasons_hold_no_value_of_the_body() {
        let idem = Problem::new(
            StatusCode::UNPROCESSABLE_ENTITY,
            "urn:idem:problem:invalid-body",
            "invalid request body",
        )
        .with_detail("missing field `charge_id` at line 1 column 80");
        assert_eq!(
            reason_for(idem.into_response()).await,
            "the body does not read as the receiver's event: 422 \
             urn:idem:problem:invalid-body: missing field `charge_id` at line 1 column 80"
        );
        // An application's detail may quote the body: only its type is kept.
        let own = Problem::new(StatusCode::UNPROCESSABLE_ENTITY, "urn:shop:bad", "bad")
            .with_detail("`amount` 4111111111111111 is too large");
        let reason = reason_for(own.into_response()).await;
        assert_eq!(
            reason,
            "the body does not read as the receiver's event: 422 urn:shop:bad"
        );
        // Plain text (axum's own rejections quote serde's message): the status alone.
        let plain = (StatusCode::BAD_REQUEST, "invalid type: string \"4111\"").into_response();
        assert_eq!(
            reason_for(plain).await,
            "the body does not read as the receiver's event: 400"
        );
    }

    /// A refusal `4xx` is kept, once per event, and answered as it was; a `5xx` is not the
    /// body's and is not kept; a delivery that cannot be kept is answered `503`.
    #[cfg(feature = "sqlite")]
    #[tokio::test]
    async fn refusals_are_kept_or_redelivered() {
        use crate::store::InboxStatus;
        use sqlx::Sqlite;

        let dir = idem_testkit::harness::new_dir("unparseable");
        let url = format!("sqlite://{}", dir.join("inbox.db").display());
        let idem = Idem::<Sqlite>::connect(&url, crate::Config::default())
            .await
            .unwrap();
        idem.migrate().await.unwrap();
        let keeper = Keeper::new(&idem, "provider_event:v1");
        let mut headers = HeaderMap::new();
        headers.insert(super::super::HEADER_WEBHOOK_ID, "evt_1".parse().unwrap());
        let body = br#"{"id":"evt_1","data":{"charge":"ch_1"}}"#;
        let refusal = || {
            Problem::new(
                StatusCode::UNPROCESSABLE_ENTITY,
                "urn:idem:problem:invalid-body",
                "invalid request body",
            )
            .with_detail("missing field `charge_id` at line 1 column 38")
            .into_response()
        };
        for deliveries in 1..=2 {
            let answer = refused(Some(&keeper), &headers, body, refusal()).await;
            assert_eq!(answer.status(), StatusCode::UNPROCESSABLE_ENTITY);
            let events = idem.inbox().list(None, 10).await.unwrap();
            assert_eq!(events.len(), 1, "{events:?}");
            assert_eq!(events[0].status, InboxStatus::Unparseable);
            assert_eq!(events[0].event_id, "evt_1");
            assert_eq!(events[0].body.as_bytes(), body);
            assert_eq!(events[0].deliveries, deliveries);
        }

        let failed = (StatusCode::SERVICE_UNAVAILABLE, "busy").into_response();
        let mut other = headers.clone();
        other.insert(super::super::HEADER_WEBHOOK_ID, "evt_2".parse().unwrap());
        let answer = refused(Some(&keeper), &other, body, failed).await;
        assert_eq!(answer.status(), StatusCode::SERVICE_UNAVAILABLE);
        assert_eq!(idem.inbox().list(None, 10).await.unwrap().len(), 1);

        idem.pool().close().await;
        let answer = refused(Some(&keeper), &other, body, refusal()).await;
        assert_eq!(answer.status(), StatusCode::SERVICE_UNAVAILABLE);
        assert!(answer.headers().contains_key(http::header::RETRY_AFTER));
    }
}
