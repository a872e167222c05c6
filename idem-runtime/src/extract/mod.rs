//! Extractors for idempotent handlers: JSON bodies whose every rejection is
//! `application/problem+json`, with optional validation.
//!
//! | extractor | validation | feature |
//! |---|---|---|
//! | [`JsonBody<T>`] | none | |
//! | [`Checked<T>`] | `T:` [`Check`], idem's own trait | |
//! | `Validated<T>` | `T: validator::Validate` | `validator` |
//! | `Garde<T>` | `T: garde::Validate` | `garde` |
//!
//! Each reads the body within idem's [`Config::max_request_body`](crate::Config), axum's
//! `DefaultBodyLimit` and any limit a tower-http layer set, answers `413` problem+json beyond
//! them, is the `body` part of the fingerprint, and is a response too. Their names leave
//! `axum::Json` alone: take axum's `Json` if you prefer axum's plain-text rejections (it is
//! an input as well).

mod body;
mod invalid;
mod key;

#[cfg(feature = "garde")]
pub use body::Garde;
#[cfg(feature = "validator")]
pub use body::Validated;
pub(crate) use body::{BodyLimit, read_body};
pub use body::{Check, Checked, JsonBody};
