//! Generated documentation of the application's idempotent operations.
//!
//! Every `#[idempotent]` handler registers its spec at link time, with its handler's name,
//! its source location and — when the attribute says `path = "POST /orders"` — its route.
//! [`operations`] lists them; [`markdown`] and [`openapi`] (from `idem-docs`) write the
//! client's contract. The documents are for clients: they leave the source locations out
//! unless [`Operations::publish_sources`] asks for them (a duplicate id's error names them
//! either way). Operations run through [`Idem::staged`](crate::Idem::staged) or
//! [`Idem::once`](crate::Idem::once) have no attribute: add them with [`Operations::with`].
//! With the `utoipa` feature, `merge_into` adds the contract to the application's own
//! `utoipa` document instead.
//!
//! Serving them is one call: [`Operations::routes`] answers `GET /openapi.json` and
//! `GET /docs/idempotency.md` ([`OPENAPI_PATH`], [`MARKDOWN_PATH`]), written once when the
//! router is built:
//!
//! ```no_run
//! # fn demo(app: axum::Router) -> Result<axum::Router, idem_runtime::docs::DuplicateOperation> {
//! let app = app.merge(idem_runtime::docs::Operations::from_registry()?.routes());
//! # Ok(app) }
//! ```
//!
//! With `utoipa`, [`Operations::documents_with`] merges the contract into the application's
//! own document first: `app.merge(operations.documents_with(api)?.routes())`.
//!
//! ```no_run
//! use idem_runtime::docs::{self, OperationDoc, Operations};
//! use idem_runtime::spec::{Mode, OperationSpec, ScopeKind};
//!
//! # fn main() -> Result<(), docs::DuplicateOperation> {
//! const PAY: OperationSpec = OperationSpec::new("pay:v1").scope(ScopeKind::Tenant).mode(Mode::Staged);
//! let operations = Operations::from_registry()?
//!     .with(OperationDoc::from_spec(&PAY).path("POST", "/payments"))?;
//! let markdown: String = operations.markdown();
//! let openapi: serde_json::Value = operations.openapi();
//! # let _ = (markdown, openapi);
//! # Ok(())
//! # }
//! ```

use std::fmt;
use std::sync::Arc;

use axum::Router;
use axum::http::header;
use axum::routing::get;
use idem_spec::OperationSpec;

use crate::Config;

/// Where [`Documents::routes`] serves the Markdown document.
pub const MARKDOWN_PATH: &str = "/docs/idempotency.md";
/// Where [`Documents::routes`] serves the OpenAPI document.
pub const OPENAPI_PATH: &str = "/openapi.json";
/// The Markdown document's content type.
pub const MARKDOWN_TYPE: &str = "text/markdown; charset=utf-8";

/// With the `utoipa` feature: idem's contract merged into the application's
/// `utoipa::openapi::OpenApi` ([`merge_into`]).
#[cfg(feature = "utoipa")]
pub use idem_docs::{MergeError, merge_into, responses_from};
pub use idem_docs::{
    OperationDoc, ProblemDoc, RequestBodyDoc, contract, markdown, openapi, problem_schema,
};

/// What an `#[idempotent]` handler registers. Emitted by the attribute; not a public API.
#[doc(hidden)]
#[derive(Debug)]
pub struct AnnotatedHandler {
    /// The handler's spec.
    pub spec: &'static OperationSpec,
    /// `path = "POST /orders"`: the method.
    pub method: Option<&'static str>,
    /// `path = "POST /orders"`: the path.
    pub path: Option<&'static str>,
    /// The handler's name.
    pub handler: &'static str,
    /// The handler takes a `webhooks::Verified` extractor ([`OperationDoc::verified_webhook`]).
    pub verified_webhook: bool,
    /// `problems = [problem(409, "urn:…", "Title")]`: the operation's own problems
    /// ([`OperationDoc::problem`]).
    pub problems: &'static [AnnotatedProblem],
    /// The body the handler's last extractor reads, when it reads one
    /// ([`OperationDoc::request_body`]): a probe of its type ([`BodyProbe`]).
    pub request_body: fn() -> Option<RequestBodyDoc>,
    /// `file!()` at the attribute.
    pub file: &'static str,
    /// `line!()` at the attribute.
    pub line: u32,
}

/// One of the operation's own problems, as the attribute's `problems` declares it
/// ([`ProblemDoc`]). Emitted by the attribute; not a public API.
#[doc(hidden)]
#[derive(Debug)]
pub struct AnnotatedProblem {
    /// Its status, 400 to 599.
    pub status: u16,
    /// Its problem `type`.
    pub type_uri: &'static str,
    /// Its `title`.
    pub title: &'static str,
    /// It carries `Retry-After`.
    pub retry_after: bool,
}

impl AnnotatedProblem {
    fn doc(&self) -> ProblemDoc {
        let problem = ProblemDoc::new(self.status, self.type_uri, self.title);
        if self.retry_after {
            problem.retry_after()
        } else {
            problem
        }
    }
}

inventory::collect!(AnnotatedHandler);

/// The body an extractor reads, for the documents' `requestBody`: its media type, whether a
/// request must have it, and the type it deserialises into (whose schema the documents give
/// when it has one). Implemented for idem's body extractors, axum's `Json`, `Form`, `Bytes`
/// and `String`, and `Option` of them. Not a public API.
#[doc(hidden)]
pub trait BodyExtractor {
    /// The type the body deserialises into.
    type Body;
    /// The body's media type.
    const MEDIA_TYPE: &'static str;
    /// A request must have it.
    const REQUIRED: bool = true;
}

/// `JSON` bodies of `T`.
macro_rules! json_bodies {
    ($($(#[$meta:meta])* $ty:ty;)*) => {$(
        $(#[$meta])*
        impl<T> BodyExtractor for $ty {
            type Body = T;
            const MEDIA_TYPE: &'static str = "application/json";
        }
    )*};
}

json_bodies! {
    crate::JsonBody<T>;
    crate::Checked<T>;
    #[cfg(feature = "validator")]
    crate::extract::Validated<T>;
    #[cfg(feature = "garde")]
    crate::extract::Garde<T>;
    axum::Json<T>;
}

impl<T> BodyExtractor for axum::Form<T> {
    type Body = T;
    const MEDIA_TYPE: &'static str = "application/x-www-form-urlencoded";
}

impl BodyExtractor for axum::body::Bytes {
    type Body = Self;
    const MEDIA_TYPE: &'static str = "application/octet-stream";
}

impl BodyExtractor for String {
    type Body = Self;
    const MEDIA_TYPE: &'static str = "text/plain";
}

impl<E: BodyExtractor> BodyExtractor for Option<E> {
    type Body = E::Body;
    const MEDIA_TYPE: &'static str = E::MEDIA_TYPE;
    const REQUIRED: bool = false;
}

#[cfg(feature = "standard-webhooks")]
impl<E: BodyExtractor> BodyExtractor for crate::webhooks::Verified<E> {
    type Body = E::Body;
    const MEDIA_TYPE: &'static str = E::MEDIA_TYPE;
    const REQUIRED: bool = E::REQUIRED;
}

/// The probe of the handler's last extractor `T`, for [`AnnotatedHandler::request_body`]:
/// `(&&&BodyProbe::<T>::NEW).request_body()` is [`SchemaBody::request_body`] when `T` is a
/// [`BodyExtractor`] whose body is a `utoipa::ToSchema` (with the `utoipa` feature),
/// [`ExtractorBody::request_body`] when it is another [`BodyExtractor`] (the media type, any
/// schema), and [`NoBody::request_body`], `None`, otherwise. Decided by trait (autoref), so
/// aliases are seen through. Not a public API.
#[doc(hidden)]
#[derive(Debug)]
pub struct BodyProbe<T>(core::marker::PhantomData<fn() -> T>);

impl<T> BodyProbe<T> {
    /// The probe.
    pub const NEW: Self = Self(core::marker::PhantomData);
}

/// See [`BodyProbe`]: a body with a schema.
#[doc(hidden)]
pub trait SchemaBody {
    /// The body, with its schema and the component schemas it refers to.
    fn request_body(&self) -> Option<RequestBodyDoc>;
}

#[cfg(feature = "utoipa")]
impl<T> SchemaBody for &&BodyProbe<T>
where
    T: BodyExtractor,
    T::Body: utoipa::ToSchema,
{
    fn request_body(&self) -> Option<RequestBodyDoc> {
        Some(with_schema::<T::Body>(extracted::<T>()))
    }
}

/// See [`BodyProbe`]: a body without a schema.
#[doc(hidden)]
pub trait ExtractorBody {
    /// The body, of any content (`{}`).
    fn request_body(&self) -> Option<RequestBodyDoc>;
}

impl<T: BodyExtractor> ExtractorBody for &BodyProbe<T> {
    fn request_body(&self) -> Option<RequestBodyDoc> {
        Some(extracted::<T>())
    }
}

/// See [`BodyProbe`]: not a body the documents know.
#[doc(hidden)]
pub trait NoBody {
    /// None.
    fn request_body(&self) -> Option<RequestBodyDoc> {
        None
    }
}

impl<T> NoBody for BodyProbe<T> {}

/// The body `T` reads: its media type, required or not, of any content.
fn extracted<T: BodyExtractor>() -> RequestBodyDoc {
    let body = RequestBodyDoc::new(T::MEDIA_TYPE);
    if T::REQUIRED { body } else { body.optional() }
}

/// `body` with the schema of `T`, as `utoipa` gives it, and the component schemas it refers
/// to (with `T`'s own when it refers to itself).
#[cfg(feature = "utoipa")]
fn with_schema<T: utoipa::ToSchema>(body: RequestBodyDoc) -> RequestBodyDoc {
    use std::collections::BTreeMap;

    // utoipa's schemas always serialise.
    let json = |schema| serde_json::to_value(schema).ok();
    let Some(schema) = json(T::schema()) else {
        return body;
    };
    let mut referred = Vec::new();
    T::schemas(&mut referred);
    let mut components = BTreeMap::new();
    for (name, referred) in referred {
        if let Some(referred) = json(referred) {
            components.entry(name).or_insert(referred);
        }
    }
    let name = T::name();
    let own = format!("\"#/components/schemas/{name}\"");
    let refers_to_itself = std::iter::once(&schema)
        .chain(components.values())
        .any(|s| s.to_string().contains(&own));
    if refers_to_itself {
        components
            .entry(name.into_owned())
            .or_insert_with(|| schema.clone());
    }
    body.schema(schema, components)
}

impl AnnotatedHandler {
    fn doc(&self) -> OperationDoc {
        let mut doc = OperationDoc::from_spec(self.spec)
            .handler(self.handler)
            .source(&format!("{}:{}", self.file, self.line));
        if let (Some(method), Some(path)) = (self.method, self.path) {
            doc = doc.path(method, path);
        }
        if self.verified_webhook {
            doc = doc.verified_webhook();
        }
        for problem in self.problems {
            doc = doc.problem(problem.doc());
        }
        if let Some(body) = (self.request_body)() {
            doc = doc.request_body(body);
        }
        doc
    }
}

/// Two operations with one id: their keys would share one namespace, and their documents
/// one entry. Give one of them another `operation` name or `version`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DuplicateOperation {
    /// The id both have.
    pub id: String,
    /// Where each is declared (`file:line`, or the handler's name, when known).
    pub declared: [String; 2],
}

impl fmt::Display for DuplicateOperation {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "two operations have the id `{}` ({} and {}): give one another `operation` name \
             or `version`",
            self.id, self.declared[0], self.declared[1]
        )
    }
}

impl std::error::Error for DuplicateOperation {}

/// A list of operations, sorted by id, each id once.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Operations {
    docs: Vec<OperationDoc>,
}

fn declared(doc: &OperationDoc) -> String {
    match (&doc.source, doc.handler.is_empty()) {
        (Some(source), _) => source.clone(),
        (None, false) => format!("handler `{}`", doc.handler),
        (None, true) => "added by hand".to_owned(),
    }
}

impl Operations {
    /// No operations.
    #[must_use]
    pub fn new() -> Self {
        Self::default()
    }

    /// Every operation an `#[idempotent]` handler linked into this program registered.
    ///
    /// # Errors
    /// [`DuplicateOperation`] when two handlers have the same operation id.
    pub fn from_registry() -> Result<Self, DuplicateOperation> {
        inventory::iter::<AnnotatedHandler>
            .into_iter()
            .try_fold(Self::new(), |operations, registration| {
                operations.with(registration.doc())
            })
    }

    /// Keeps only the operations whose ids are listed: a program that links handlers it
    /// does not serve documents the ones it does.
    ///
    /// ```
    /// use idem_runtime::docs::{OperationDoc, Operations};
    /// use idem_runtime::spec::OperationSpec;
    ///
    /// let pay = OperationDoc::from_spec(&OperationSpec::new("pay:v1"));
    /// let refund = OperationDoc::from_spec(&OperationSpec::new("refund:v1"));
    /// let operations = Operations::new().with(pay).unwrap().with(refund).unwrap();
    /// assert_eq!(operations.select(&["pay:v1"]).docs().len(), 1);
    /// ```
    #[must_use]
    pub fn select(mut self, ids: &[&str]) -> Self {
        self.docs.retain(|doc| ids.contains(&doc.id.as_str()));
        self
    }

    /// Adds an operation.
    ///
    /// ```
    /// use idem_runtime::docs::{OperationDoc, Operations};
    /// use idem_runtime::spec::OperationSpec;
    ///
    /// let pay = OperationDoc::from_spec(&OperationSpec::new("pay:v1")).path("POST", "/payments");
    /// let operations = Operations::new().with(pay.clone()).unwrap();
    /// assert_eq!(operations.docs().len(), 1);
    /// assert!(operations.with(pay).is_err());
    /// ```
    ///
    /// # Errors
    /// [`DuplicateOperation`] when an operation of that id is already listed.
    pub fn with(mut self, doc: OperationDoc) -> Result<Self, DuplicateOperation> {
        match self.docs.binary_search_by(|d| d.id.cmp(&doc.id)) {
            Ok(found) => Err(DuplicateOperation {
                id: doc.id.clone(),
                declared: [declared(&self.docs[found]), declared(&doc)],
            }),
            Err(at) => {
                self.docs.insert(at, doc);
                Ok(self)
            }
        }
    }

    /// Adds a response of the operation `id` itself (its success, say) to its document
    /// ([`OperationDoc::responds`]); nothing if no operation has that id.
    ///
    /// ```
    /// use idem_runtime::docs::{OperationDoc, Operations};
    /// use idem_runtime::spec::OperationSpec;
    ///
    /// let pay = OperationDoc::from_spec(&OperationSpec::new("pay:v1"));
    /// let operations = Operations::new().with(pay).unwrap().responds("pay:v1", 201, "The payment");
    /// assert_eq!(operations.docs()[0].responses, [(201, "The payment".to_owned())]);
    /// ```
    #[must_use]
    pub fn responds(mut self, id: &str, status: u16, description: &str) -> Self {
        if let Some(doc) = self.docs.iter_mut().find(|d| d.id == id) {
            *doc = doc.clone().responds(status, description);
        }
        self
    }

    /// Describes every operation listed so far as a server with `config` answers it
    /// ([`Config::doc`]): the key's spellings it accepts, its leases, whether its `422` names
    /// the fields that differ, whether its storage is sealed. Without it the documents
    /// describe the defaults. [`Idem::register_docs`](crate::Idem::register_docs) records
    /// the same. Call it after the last [`Operations::with`].
    ///
    /// ```
    /// use idem_runtime::docs::{OperationDoc, Operations};
    /// use idem_runtime::key::KeyFormat;
    /// use idem_runtime::spec::OperationSpec;
    /// use idem_runtime::Config;
    ///
    /// let pay = OperationDoc::from_spec(&OperationSpec::new("pay:v1"));
    /// let config = Config::default().key_format(KeyFormat::Strict);
    /// let operations = Operations::new().with(pay).unwrap().served_by(&config);
    /// assert_eq!(operations.docs()[0].key_format, KeyFormat::Strict);
    /// ```
    #[must_use]
    pub fn served_by(mut self, config: &Config) -> Self {
        self.docs = self.docs.into_iter().map(|doc| config.doc(doc)).collect();
        self
    }

    /// Whether the documents name where each handler is written (`src/orders.rs:212`, as
    /// the attribute records it): the Markdown beside the handler's name, the OpenAPI
    /// document as `x-idempotency.source`, in every operation's document
    /// ([`OperationDoc::publish_source`]). Off by default: documents served to clients do
    /// not tell them where the server's code is. Turn it on for documents the application's
    /// own developers read. It sets the operations listed so far: call it after the last
    /// [`Operations::with`].
    ///
    /// ```
    /// use idem_runtime::docs::{OperationDoc, Operations};
    /// use idem_runtime::spec::OperationSpec;
    ///
    /// let pay = OperationDoc::from_spec(&OperationSpec::new("pay:v1")).source("src/pay.rs:7");
    /// let operations = Operations::new().with(pay).unwrap();
    /// assert!(!operations.markdown().contains("src/pay.rs:7"));
    /// assert!(operations.publish_sources(true).markdown().contains("`src/pay.rs:7`"));
    /// ```
    #[must_use]
    pub fn publish_sources(mut self, publish: bool) -> Self {
        for doc in &mut self.docs {
            doc.publish_source = publish;
        }
        self
    }

    /// With the `utoipa` feature: each routed operation's own responses read from the
    /// application's document ([`responses_from`]), so that the Markdown document lists what
    /// `#[utoipa::path]` says, and [`merge_into`] that document afterwards.
    ///
    /// # Errors
    /// [`MergeError`] when the document does not serialise to JSON.
    #[cfg(feature = "utoipa")]
    #[cfg_attr(docsrs, doc(cfg(feature = "utoipa")))]
    pub fn responses_from(mut self, api: &utoipa::openapi::OpenApi) -> Result<Self, MergeError> {
        responses_from(api, &mut self.docs)?;
        Ok(self)
    }

    /// The operations, sorted by id.
    #[must_use]
    pub fn docs(&self) -> &[OperationDoc] {
        &self.docs
    }

    /// The operations, sorted by id.
    #[must_use]
    pub fn into_vec(self) -> Vec<OperationDoc> {
        self.docs
    }

    /// The Markdown document ([`markdown`]).
    #[must_use]
    pub fn markdown(&self) -> String {
        markdown(&self.docs)
    }

    /// The OpenAPI 3.1 document ([`openapi`]).
    #[must_use]
    pub fn openapi(&self) -> serde_json::Value {
        openapi(&self.docs)
    }

    /// Both documents, written: [`Operations::markdown`] and [`Operations::openapi`].
    #[must_use]
    pub fn documents(&self) -> Documents {
        Documents {
            markdown: self.markdown(),
            // A `Value` always serialises.
            openapi: serde_json::to_string_pretty(&self.openapi()).unwrap_or_default(),
        }
    }

    /// Both documents, the OpenAPI one being the application's `api` with the contract of
    /// these operations merged in ([`merge_into`]).
    ///
    /// # Errors
    /// [`MergeError`] when `api` does not convert.
    #[cfg(feature = "utoipa")]
    #[cfg_attr(docsrs, doc(cfg(feature = "utoipa")))]
    pub fn documents_with(
        &self,
        mut api: utoipa::openapi::OpenApi,
    ) -> Result<Documents, MergeError> {
        merge_into(&mut api, &self.docs)?;
        Ok(Documents {
            markdown: self.markdown(),
            // It just went through JSON and back.
            openapi: serde_json::to_string_pretty(&api).unwrap_or_default(),
        })
    }

    /// `GET /openapi.json` and `GET /docs/idempotency.md` serving these operations'
    /// documents ([`Documents::routes`]): `app.merge(operations.routes())`.
    pub fn routes<S: Clone + Send + Sync + 'static>(&self) -> Router<S> {
        self.documents().routes()
    }
}

/// The two documents of a list of operations, written ([`Operations::documents`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Documents {
    /// The Markdown contract.
    pub markdown: String,
    /// The OpenAPI 3.1 document, as JSON text.
    pub openapi: String,
}

impl Documents {
    /// `GET` [`OPENAPI_PATH`] (`application/json`) and `GET` [`MARKDOWN_PATH`]
    /// ([`MARKDOWN_TYPE`]) answering them, as written now.
    pub fn routes<S: Clone + Send + Sync + 'static>(self) -> Router<S> {
        let markdown = Arc::<str>::from(self.markdown);
        let openapi = Arc::<str>::from(self.openapi);
        Router::new()
            .route(
                MARKDOWN_PATH,
                get(async move || {
                    (
                        [(header::CONTENT_TYPE, MARKDOWN_TYPE)],
                        markdown.to_string(),
                    )
                }),
            )
            .route(
                OPENAPI_PATH,
                get(async move || {
                    (
                        [(header::CONTENT_TYPE, "application/json")],
                        openapi.to_string(),
                    )
                }),
            )
    }
}

/// Every operation registered by an `#[idempotent]` handler linked into this program, sorted
/// by id.
///
/// ```no_run
/// let operations = idem_runtime::docs::operations().expect("operation ids are unique");
/// let text = idem_runtime::docs::markdown(&operations);
/// # let _ = text;
/// ```
///
/// # Errors
/// [`DuplicateOperation`] when two handlers have the same operation id.
pub fn operations() -> Result<Vec<OperationDoc>, DuplicateOperation> {
    Operations::from_registry().map(Operations::into_vec)
}
