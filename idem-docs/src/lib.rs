//! Generated documentation of idem's idempotent operations.
//!
//! An [`OperationDoc`] is an operation's [`OperationSpec`](idem_spec::OperationSpec) plus
//! where it is served (method, path), its handler and source location (named in the
//! documents only on request: [`OperationDoc::publish_source`]). From a list of them
//! this crate writes the client's contract:
//!
//! - [`markdown`]: an overview table, then a section per operation with where its key comes
//!   from (the `Idempotency-Key` header, or headers and body fields of the request) and how
//!   it is written, whether it is required, every status idem can answer for that operation
//!   and when, what the client does in each case, `Retry-After`, `Idempotent-Replayed`, what
//!   happens when the key's window lapses, and an example request with its retry;
//! - [`openapi`]: an OpenAPI 3.1 document with the key's header parameter, problem+json
//!   responses (a `Problem` schema in `components`) and an `x-idempotency` extension with the
//!   policy.
//!
//! ```
//! use std::time::Duration;
//! use idem_docs::{OperationDoc, markdown, openapi};
//! use idem_spec::{OperationSpec, ScopeKind};
//!
//! let spec = OperationSpec::new("create_order:v1")
//!     .scope(ScopeKind::Tenant)
//!     .ttl(Duration::from_secs(24 * 3600));
//! let docs = [OperationDoc::from_spec(&spec).path("POST", "/orders").responds(201, "The order")];
//! assert!(markdown(&docs).contains("| 409 `urn:idem:problem:in-flight` + `Retry-After` |"));
//! assert!(openapi(&docs)["paths"]["/orders"]["post"]["responses"]["201"].is_object());
//! ```
//!
//! # Features
//!
//! | Feature  | Adds |
//! |----------|------|
//! | `utoipa` | `merge_into`: the contract merged into an application's `utoipa::openapi::OpenApi` (through `serde_json`); `responses_from`: the application's own responses read from it |
//!
//! # Decisions
//!
//! - **One wording.** Every sentence lives in [`contract`]; both generators (and the
//!   attribute's rustdoc section) take it from there, so the documents cannot disagree.
//! - **Only what applies.** The statuses listed depend on the spec: `410` only with
//!   `on_expired = "gone"`, `400 missing-key` only for a required key, `401`/`403` only for
//!   tenant and user scopes (whose principal the application authenticates), staged mode's
//!   `503 interrupted` and lease takeover only in staged mode, the `409` wording after
//!   `on_in_flight`; and on the server's settings, which the runtime's `Config::doc` writes
//!   into the document: the key's format, the lease, the `422`'s field names,
//!   `500 sealed-unreadable` only for a server that seals what it stores.
//! - **Body statuses are listed.** `413`, `415`, `400 malformed-json` and `422 invalid-body`
//!   come from idem's JSON body extractors (`JsonBody`, `Checked`, …); a spec does not say
//!   which extractor a handler uses, so they are always listed. `invalid-body` is a body of
//!   the wrong shape, or one that fails the `validator` or `garde` rules of its type
//!   (`Validated`, `Garde`): a failed `Check` answers the application's own problem, its
//!   status and type, which the documents list only as the application documents them
//!   ([`contract::INVALID_BODY`]).
//! - **Verified webhooks say what they need.** An operation whose handler takes the runtime's
//!   `webhooks::Verified` ([`OperationDoc::verified_webhook`], which the attribute sets) lists
//!   the Standard Webhooks request headers (`webhook-id`, `webhook-timestamp`,
//!   `webhook-signature`, required; [`contract::WEBHOOK_HEADERS`]) and the `401`
//!   [`contract::WEBHOOK_UNVERIFIED`] of a delivery whose signature does not verify, in both
//!   documents; the application need not write them in its `#[utoipa::path]`.
//! - **Staged mode, as it is.** A staged operation's calls to other systems are recorded
//!   steps: a step whose result was recorded does not run again, and one interrupted before
//!   its result was recorded runs again with the same provider key, so that one effect needs
//!   a provider that deduplicates on that key. The documents say exactly that
//!   ([`contract::staged_calls`]), and nothing stronger.
//! - **No source locations unless asked.** An [`OperationDoc`]'s `source` (`file:line`, which
//!   the runtime's registry records) is for the server's developers: the Markdown and the
//!   OpenAPI document leave it out unless [`OperationDoc::publish_source`] is set (the
//!   runtime's `Operations::publish_sources` sets it on every operation).
//! - **The operation's own responses** are added with [`OperationDoc::responds`]; without a
//!   2xx of its own, success is documented as OpenAPI's `2XX`.
//! - **The operation's own problems** ([`ProblemDoc`], added with [`OperationDoc::problem`]
//!   or declared with the attribute's `problems = [problem(409, "urn:…", "…")]`) are listed
//!   under their status with their `type`, beside idem's problems of that status, so that a
//!   client tells them apart; retry advice for one only when it carries `Retry-After`, and
//!   then for its type only (with a new key when the answer is stored with the key). A
//!   response the application describes that names a problem's type is that problem's row.
//! - **The key's syntax** is the IETF draft's structured-field string; the length limits are
//!   the runtime's (1 to 8192 visible ASCII characters; one longer than 255 is kept as its
//!   digest, `sha256:` and 64 hexadecimal digits, which the documents say). Its schema is
//!   exactly what the server
//!   accepts in its format ([`OperationDoc::key_format`], the runtime's `Config::key_format`):
//!   [`contract::KEY_PATTERN`] when strict (the string, with the parameters an item may carry:
//!   integers, decimals, strings, tokens, booleans), [`contract::LENIENT_KEY_PATTERN`] by
//!   default (also a bare key without `"` or `\`). The runtime's property tests hold the
//!   pattern and the parser to each other.
//! - **The request's body, as far as it is known.** The attribute records the handler's body
//!   extractor ([`RequestBodyDoc`]): the OpenAPI document has its `requestBody` with its
//!   media type (`application/json` for idem's JSON extractors and axum's `Json`), and with
//!   the schema of its type when the type provides one (a `utoipa::ToSchema` type, with the
//!   runtime's `utoipa` feature; its component schemas go into `components.schemas`, so that
//!   no `$ref` dangles), else the empty schema `{}`.
//! - **A complete document is the application's.** Response bodies, path parameters and
//!   security schemes are the application's to describe, with `utoipa`, and so is a request
//!   body it describes itself; [`merge_into`] adds the contract to them. A status both describe keeps the application's
//!   schema and gains idem's description, headers and problem types; idem's replay joins
//!   every 2xx the application documents. [`responses_from`] reads the application's
//!   statuses back for the Markdown document, so they are written once, in
//!   `#[utoipa::path]`. The repository's examples serve such a document, and its CI tests it
//!   with schemathesis.
//! - **JSON**: [`OperationDoc`] serialises with the attribute's spellings (`"24h"`,
//!   `"tenant"`) so tools can store it and read it back.
//! - **Keys taken from the request** (`key = header("webhook-id")`, `key = body("/id")`,
//!   several parts joined with `:`) are [`OperationDoc::key_from`], a list of
//!   [`KeyPartDoc`] (owned copies of the spec's `KeyPart`), serialised as
//!   `"key_from": [{"header": "webhook-id"}, {"body": "/id"}]` and left out for the
//!   `Idempotency-Key` header, so documents stored before it read back unchanged, and
//!   documents of default operations are byte for byte what they were. Parts read back are
//!   checked as the attribute checks them. Such a key is always required, whatever
//!   [`OperationDoc::key`] says.
//! - **Where the key is, in each document.** The contract names the source wherever it named
//!   `Idempotency-Key`: the summary, the key's paragraph (each part taken verbatim, a body
//!   field's string as its text and a number or boolean as its JSON text, percent-encoding,
//!   joining, 1 to 8192 characters, the digest of a long one), the `400 missing-key` and
//!   `400 invalid-key` rows, and the
//!   example request, which carries the key's headers and body fields and no
//!   `Idempotency-Key`. In OpenAPI each header part is a required parameter under its own
//!   name (string, `maxLength` 8192, and `minLength` 1 when it is the whole key) in place of
//!   `Idempotency-Key`; body fields add no parameter (the request body is the application's
//!   to describe), so the key's paragraph is added to the operation's description, and
//!   `x-idempotency` lists the parts as `keyFrom`, camel-cased like its other members.
#![cfg_attr(docsrs, feature(doc_cfg))]
#![warn(missing_docs, unreachable_pub)]

pub mod contract;
mod markdown;
mod model;
mod openapi;
#[cfg(feature = "utoipa")]
mod utoipa;

pub use crate::markdown::markdown;
pub use crate::model::{KeyPartDoc, OperationDoc, ProblemDoc, RequestBodyDoc};
pub use crate::openapi::{openapi, problem_schema};
#[cfg(feature = "utoipa")]
#[cfg_attr(docsrs, doc(cfg(feature = "utoipa")))]
pub use crate::utoipa::{MergeError, merge_into, responses_from};
