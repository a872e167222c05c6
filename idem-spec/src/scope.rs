//! The scope value stored with every key: `global`, `tenant:<id>` or `user:<id>`.

use std::fmt;

use crate::words::ScopeKind;

/// The namespace of one key: its [`ScopeKind`] and, for tenant and user scopes, the owner.
///
/// The stored form is `global`, `tenant:<id>` or `user:<id>`; the owner may contain any
/// character, `:` included (only the first `:` separates).
///
/// ```
/// use idem_spec::{Scope, ScopeKind};
///
/// let scope = Scope::tenant("acme");
/// assert_eq!(scope.as_str(), "tenant:acme");
/// assert_eq!(scope.kind(), ScopeKind::Tenant);
/// assert_eq!(scope.owner(), Some("acme"));
/// assert_eq!("tenant:acme".parse::<Scope>(), Ok(scope));
/// assert_eq!(Scope::global().as_str(), "global");
/// ```
#[derive(Clone, PartialEq, Eq, Hash)]
pub struct Scope {
    value: String,
    kind: ScopeKind,
}

/// Why a scope was refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum ScopeError {
    /// Not `global`, `tenant:<id>` or `user:<id>`.
    Malformed,
    /// A tenant or user scope with an empty owner.
    NoOwner,
    /// An owner for the global scope, or none for a tenant or user scope.
    OwnerMismatch,
}

impl fmt::Display for ScopeError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Self::Malformed => "a scope is `global`, `tenant:<id>` or `user:<id>`",
            Self::NoOwner => "a tenant or user scope needs a non-empty id",
            Self::OwnerMismatch => "only tenant and user scopes have an owner",
        })
    }
}

impl std::error::Error for ScopeError {}

impl Scope {
    /// The one namespace shared by every caller.
    #[must_use]
    pub fn global() -> Self {
        Self {
            value: ScopeKind::Global.as_str().to_owned(),
            kind: ScopeKind::Global,
        }
    }

    /// A tenant's namespace.
    #[must_use]
    pub fn tenant(id: &str) -> Self {
        Self::owned(ScopeKind::Tenant, id)
    }

    /// A user's namespace.
    #[must_use]
    pub fn user(id: &str) -> Self {
        Self::owned(ScopeKind::User, id)
    }

    fn owned(kind: ScopeKind, id: &str) -> Self {
        let mut value = String::with_capacity(kind.as_str().len() + 1 + id.len());
        value.push_str(kind.as_str());
        value.push(':');
        value.push_str(id);
        Self { value, kind }
    }

    /// The scope of `kind` for `owner`: `owner` must be `None` for the global scope and a
    /// non-empty id otherwise.
    ///
    /// # Errors
    /// [`ScopeError::OwnerMismatch`] or [`ScopeError::NoOwner`].
    pub fn new(kind: ScopeKind, owner: Option<&str>) -> Result<Self, ScopeError> {
        match (kind, owner) {
            (ScopeKind::Global, None) => Ok(Self::global()),
            (ScopeKind::Global, Some(_)) | (_, None) => Err(ScopeError::OwnerMismatch),
            (_, Some("")) => Err(ScopeError::NoOwner),
            (kind, Some(owner)) => Ok(Self::owned(kind, owner)),
        }
    }

    /// The stored form.
    #[must_use]
    pub fn as_str(&self) -> &str {
        &self.value
    }

    /// Tenant, user or global.
    #[must_use]
    pub fn kind(&self) -> ScopeKind {
        self.kind
    }

    /// The tenant or user id; `None` for the global scope.
    #[must_use]
    pub fn owner(&self) -> Option<&str> {
        match self.kind {
            ScopeKind::Global => None,
            kind => Some(&self.value[kind.as_str().len() + 1..]),
        }
    }
}

impl std::str::FromStr for Scope {
    type Err = ScopeError;

    fn from_str(s: &str) -> Result<Self, ScopeError> {
        if s == ScopeKind::Global.as_str() {
            return Ok(Self::global());
        }
        let (kind, owner) = s.split_once(':').ok_or(ScopeError::Malformed)?;
        let kind = match kind {
            "tenant" => ScopeKind::Tenant,
            "user" => ScopeKind::User,
            _ => return Err(ScopeError::Malformed),
        };
        Self::new(kind, Some(owner))
    }
}

impl fmt::Display for Scope {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.value)
    }
}

impl fmt::Debug for Scope {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_tuple("Scope").field(&self.value).finish()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parse_and_build_agree() {
        assert_eq!("user:u:1".parse::<Scope>(), Ok(Scope::user("u:1")));
        assert_eq!(Scope::user("u:1").owner(), Some("u:1"));
        assert_eq!("global".parse::<Scope>(), Ok(Scope::global()));
        assert_eq!("tenant:".parse::<Scope>(), Err(ScopeError::NoOwner));
        assert_eq!("team:x".parse::<Scope>(), Err(ScopeError::Malformed));
        assert_eq!("globalx".parse::<Scope>(), Err(ScopeError::Malformed));
        assert_eq!(
            Scope::new(ScopeKind::Global, Some("x")),
            Err(ScopeError::OwnerMismatch)
        );
        assert_eq!(
            Scope::new(ScopeKind::Tenant, None),
            Err(ScopeError::OwnerMismatch)
        );
    }
}
