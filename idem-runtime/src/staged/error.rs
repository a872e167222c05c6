//! What a step's failure means: [`StepError`], and [`Finished`], the end of a staged operation's work.

use std::fmt;
use std::time::Duration;

use http::StatusCode;

use crate::problem::Problem;
use crate::protocol::Record;

/// Why a staged operation stopped before [`Attempt::finish`](super::Attempt::finish).
#[derive(Debug)]
#[non_exhaustive]
pub enum StepError {
    /// A definitive failure (a declined card): this response is stored and replayed, and the
    /// key is done. Boxed so that `Result<_, StepError>` stays small; build it with
    /// [`StepError::permanent`].
    Permanent(Box<Record>),
    /// A failure worth retrying (a provider timeout): the lease is released, the client gets
    /// `503` with `Retry-After`, and a retry with the same key resumes after the recorded
    /// steps.
    Retryable {
        /// What happened, for logs.
        reason: String,
        /// When to try again (default: [`crate::Config::retry_after`]).
        retry_after: Option<Duration>,
    },
    /// This attempt's lease was taken over: another attempt owns the key now, and nothing
    /// this one writes counts.
    LeaseLost,
    /// The store failed; the key stays resumable.
    Store(sqlx::Error),
    /// A step's result could not be recorded or read back as its type.
    Journal(serde_json::Error),
}

impl StepError {
    /// The problem type of a step another system refused for good
    /// ([`StepError::from_status`]).
    pub const REFUSED: &'static str = "urn:idem:problem:step-refused";

    /// [`StepError::Permanent`]: store `record` (a [`Record`], or a [`Problem`]) as the key's
    /// response and end the key.
    #[must_use]
    pub fn permanent(record: impl Into<Record>) -> Self {
        Self::Permanent(Box::new(record.into()))
    }

    /// What another system's answer means for the step that called it, when it is not the
    /// answer the step expects — the one classification of a provider's HTTP status, so that
    /// a step needs to handle only its own successes (and its own refusals, such as a
    /// declined card):
    ///
    /// | the answer | the step | its client |
    /// |---|---|---|
    /// | `408`, `409`, `425`, `429`, any `5xx`, or not a `4xx` at all | [`StepError::Retryable`], with the answer's `Retry-After` | `503` with `Retry-After`; a retry or the [`Reconciler`](super::Reconciler) resumes the key, and the step runs again with the same provider key |
    /// | any other `4xx` | [`StepError::Permanent`]: `422`, problem type [`StepError::REFUSED`], naming the status | that problem, replayed to every retry: the provider would refuse the same request under the same provider key the same way |
    ///
    /// ```
    /// use std::time::Duration;
    /// use http::StatusCode;
    /// use idem_runtime::staged::StepError;
    ///
    /// let busy = StepError::from_status(StatusCode::TOO_MANY_REQUESTS, Some(Duration::from_secs(2)));
    /// assert!(matches!(busy, StepError::Retryable { retry_after: Some(_), .. }));
    /// let refused = StepError::from_status(StatusCode::UNPROCESSABLE_ENTITY, None);
    /// let StepError::Permanent(record) = refused else { panic!() };
    /// assert_eq!(record.status, StatusCode::UNPROCESSABLE_ENTITY);
    /// ```
    #[must_use]
    pub fn from_status(status: StatusCode, retry_after: Option<Duration>) -> Self {
        let transient = matches!(status.as_u16(), 408 | 409 | 425 | 429);
        if !status.is_client_error() || transient {
            return Self::Retryable {
                reason: format!("another system answered {status}"),
                retry_after,
            };
        }
        Self::permanent(
            Problem::new(
                StatusCode::UNPROCESSABLE_ENTITY,
                Self::REFUSED,
                "refused by another system",
            )
            .with_detail(format!(
                "a step of this request was refused for good by the system it calls (it \
                 answered {status}); retrying it under this key changes nothing: send a \
                 corrected request under a new key"
            )),
        )
    }

    /// [`StepError::Retryable`] with the default `Retry-After`.
    pub fn retryable(reason: impl fmt::Display) -> Self {
        Self::Retryable {
            reason: reason.to_string(),
            retry_after: None,
        }
    }
}

impl fmt::Display for StepError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Permanent(record) => write!(f, "failed for good with {}", record.status),
            Self::Retryable { reason, .. } => write!(f, "interrupted: {reason}"),
            Self::LeaseLost => f.write_str("the attempt's lease was taken over"),
            Self::Store(error) => write!(f, "store: {error}"),
            Self::Journal(error) => write!(f, "journal: {error}"),
        }
    }
}

impl std::error::Error for StepError {}

impl From<sqlx::Error> for StepError {
    fn from(error: sqlx::Error) -> Self {
        Self::Store(error)
    }
}

impl From<serde_json::Error> for StepError {
    fn from(error: serde_json::Error) -> Self {
        Self::Journal(error)
    }
}

/// A `reqwest` call of a step that failed ([`reqwest::Error`]): an error that carries an
/// HTTP status (from `error_for_status`) is classified by [`StepError::from_status`]; any
/// other — a timeout, a refused or dropped connection, a body that does not read as the
/// step's type — is [`StepError::Retryable`], with its causes in the reason (reqwest's own
/// message leaves them out).
#[cfg(feature = "reqwest")]
impl From<reqwest::Error> for StepError {
    fn from(error: reqwest::Error) -> Self {
        if let Some(status) = error.status() {
            return Self::from_status(status, None);
        }
        let mut reason = error.to_string();
        let mut source = std::error::Error::source(&error);
        while let Some(cause) = source {
            reason.push_str(": ");
            reason.push_str(&cause.to_string());
            source = cause.source();
        }
        Self::retryable(reason)
    }
}

#[cfg(feature = "reqwest")]
impl StepError {
    /// [`StepError::from_status`] of a provider's answer, with its `Retry-After` (in
    /// seconds) when it has one: for the answers a step does not expect.
    ///
    /// ```no_run
    /// use idem_runtime::staged::StepError;
    ///
    /// async fn charge(http: &reqwest::Client, provider_key: String) -> Result<String, StepError> {
    ///     let response = http
    ///         .post("https://provider.example/charges")
    ///         .header("idempotency-key", provider_key)
    ///         .send()
    ///         .await?; // no answer: retryable
    ///     match response.status() {
    ///         reqwest::StatusCode::CREATED => Ok(response.text().await?),
    ///         _ => Err(StepError::from_response(&response)),
    ///     }
    /// }
    /// ```
    #[must_use]
    pub fn from_response(response: &reqwest::Response) -> Self {
        let retry_after = response
            .headers()
            .get(http::header::RETRY_AFTER)
            .and_then(|value| value.to_str().ok())
            .and_then(|value| value.trim().parse::<u64>().ok())
            .map(Duration::from_secs);
        Self::from_status(response.status(), retry_after)
    }
}

/// Proof that [`Attempt::finish`](super::Attempt::finish) stored the response: what a staged operation returns.
#[derive(Debug)]
pub struct Finished(pub(super) Record);

impl Finished {
    /// The stored response.
    #[must_use]
    pub fn record(&self) -> &Record {
        &self.0
    }
}
