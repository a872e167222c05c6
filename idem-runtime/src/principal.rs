//! Who is calling: the application's authenticated extractor, and the state that names it.

use axum::extract::FromRequestParts;
use http::request::Parts;

use crate::error::Error;
use crate::fingerprint::{FingerprintError, Input, InputWriter, part};
use crate::protocol::Idem;
use crate::spec::{OperationSpec, Scope, ScopeKind};
use crate::store::Backend;

/// The authenticated caller, as the application's own auth extractor knows it.
///
/// `scope = "tenant"` keys by [`Principal::tenant`] and `scope = "user"` by
/// [`Principal::user`]. idem never reads a tenant from a client-supplied header: the value
/// comes from whatever your extractor verified (a session, a JWT, mTLS …). A principal is
/// never part of the fingerprint.
#[diagnostic::on_unimplemented(
    message = "`{Self}` is not a `Principal`",
    label = "`IdemState::Principal` must implement `idem_runtime::Principal`",
    note = "implement `Principal` for your authentication extractor, returning the tenant and/or user it verified; use `idem_runtime::Anonymous` when every operation is `scope = \"global\"`"
)]
pub trait Principal {
    /// Whether this type can name a tenant at all: `false` for a principal that never does
    /// ([`Anonymous`]), so that `#[idempotent(scope = "tenant", state = AppState)]` with
    /// such a principal is a compile error instead of a `401` on every request. `true`
    /// unless overridden.
    const NAMES_TENANT: bool = true;
    /// Whether this type can name a user at all; as [`Principal::NAMES_TENANT`], for
    /// `scope = "user"`.
    const NAMES_USER: bool = true;

    /// The tenant the caller acts for.
    fn tenant(&self) -> Option<&str> {
        None
    }

    /// The caller's user id.
    fn user(&self) -> Option<&str> {
        None
    }

    /// The scope of `spec`'s keys for this caller, for the plain function API.
    ///
    /// # Errors
    /// [`Error::NoScope`] when the spec's scope needs a tenant or user the principal does
    /// not have.
    fn scope_for(&self, spec: &OperationSpec) -> Result<Scope, Error> {
        scope_of(spec.scope, self)
    }
}

pub(crate) fn scope_of<P: Principal + ?Sized>(
    kind: ScopeKind,
    principal: &P,
) -> Result<Scope, Error> {
    let owner = match kind {
        ScopeKind::Tenant => principal.tenant(),
        ScopeKind::User => principal.user(),
        _ => return Ok(Scope::global()),
    };
    match owner {
        Some(owner) if !owner.is_empty() => {
            Scope::new(kind, Some(owner)).map_err(|_| Error::NoScope(kind.as_str()))
        }
        _ => Err(Error::NoScope(kind.as_str())),
    }
}

/// A principal is who asks, not what is asked: never part of the fingerprint. (Not offered
/// as a fix when a type is not an `Input`: implementing `Principal` is rarely the answer.)
#[diagnostic::do_not_recommend]
impl<P: Principal> Input for P {
    type Part = part::Ignored;
    fn write(&self, _: InputWriter<'_>) -> Result<(), FingerprintError> {
        Ok(())
    }
}

/// A principal for applications whose operations are all `scope = "global"`.
#[derive(Debug, Clone, Copy, Default, serde::Serialize, serde::Deserialize)]
pub struct Anonymous;

impl Principal for Anonymous {
    const NAMES_TENANT: bool = false;
    const NAMES_USER: bool = false;
}

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
#[diagnostic::on_unimplemented(
    message = "`{Self}` is not an `IdemState<{DB}>`",
    label = "the router's state must give idempotent handlers an `Idem<{DB}>`",
    note = "implement `idem_runtime::IdemState<{DB}>` for the state: which store (`fn idem`) and which extractor authenticates the caller (`type Principal`)",
    note = "the handler's transaction decides the backend: a `Transaction<'_, {DB}>` needs an `Idem<{DB}>` in the state"
)]
pub trait IdemState<DB: Backend>: Send + Sync + Sized + 'static {
    /// The application's authenticated extractor. Its rejection (say `401`) is answered
    /// before idem looks at the key. It runs once per request: a handler that takes the same
    /// extractor gets the value idem extracted.
    type Principal: Principal + FromRequestParts<Self> + Send + 'static;

    /// The store handle.
    fn idem(&self) -> &Idem<DB>;
}
