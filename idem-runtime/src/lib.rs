#![doc = include_str!("../README.md")]
#![cfg_attr(docsrs, feature(doc_cfg))]
#![warn(missing_docs, unreachable_pub)]

mod canonical;
pub mod clock;
mod config;
mod connections;
pub mod docs;
mod error;
pub mod extract;
#[cfg(feature = "failpoints")]
#[cfg_attr(docsrs, doc(cfg(feature = "failpoints")))]
pub mod failpoint;
#[cfg(not(feature = "failpoints"))]
mod failpoint;
pub mod fields;
pub mod fingerprint;
mod first_step;
mod handler;
mod hex;
mod hold;
pub mod inbox;
pub mod key;
mod maintenance;
mod once;
pub mod outbox;
mod principal;
mod problem;
pub mod protocol;
mod record;
pub mod resume;
pub mod staged;
pub mod telemetry;
#[cfg(feature = "standard-webhooks")]
#[cfg_attr(docsrs, doc(cfg(feature = "standard-webhooks")))]
pub mod webhooks;

/// The vocabulary of operations ([`idem_spec`]): [`OperationSpec`](spec::OperationSpec),
/// [`Scope`](spec::Scope), scopes, expiry policies, durations, operation ids.
pub use idem_spec as spec;

/// The key table ([`idem_store`]): the [`Backend`](store::Backend) trait, the migrations,
/// and [`KeyTable`](store::KeyTable) for tools.
pub use idem_store as store;

pub use crate::config::{Config, ReplicaUrl};
pub use crate::error::Error;
pub use crate::extract::{Check, Checked, JsonBody};
pub use crate::fingerprint::Input;
pub use crate::key::IdempotencyKey;
pub use crate::once::{Done, OnceError};
pub use crate::principal::{Anonymous, IdemState, Principal};
pub use crate::problem::Problem;
pub use crate::protocol::Idem;
pub use crate::record::REPLAYED_HEADER;

#[doc = include_str!("../docs/idempotent.md")]
pub use idem_macros::idempotent;

/// Re-exported so that handler signatures can name `sqlx::Transaction` and the database of
/// every store idem supports ([`store`](crate::store#stores)) without a dependency of their
/// own. Your own queries need `sqlx` as a dependency (its macros name `::sqlx`): see the
/// README.
pub use sqlx;

/// Fail points are test machinery: without the `failpoints` feature they are not there.
///
/// ```compile_fail
/// use idem_runtime::failpoint::FailPoint;
/// ```
#[cfg(all(doctest, not(feature = "failpoints")))]
pub struct FailPointsNeedTheirFeature;

/// The canonical form without the hash, for the fuzz targets (`fuzz/` in the repository) and
/// the property tests. Not a public API: it changes between versions.
#[doc(hidden)]
pub mod __fuzz {
    /// The canonical JSON (RFC 8785, integers digit for digit) that [`Fingerprint::of`]
    /// hashes after the operation id.
    ///
    /// [`Fingerprint::of`]: crate::fingerprint::Fingerprint::of
    ///
    /// # Errors
    /// When `value` cannot be written canonically.
    pub fn canonical_json<T: serde::Serialize + ?Sized>(
        value: &T,
    ) -> Result<Vec<u8>, crate::fingerprint::FingerprintError> {
        Ok(crate::canonical::to_vec(value)?)
    }
}

/// What the `#[idempotent]` expansion names. Not a public API: it changes between versions.
#[doc(hidden)]
pub mod __private {
    pub use crate::docs::{
        AnnotatedHandler, AnnotatedProblem, BodyProbe, ExtractorBody, NoBody, SchemaBody,
    };
    pub use crate::fingerprint::DynInput;
    pub use crate::handler::{
        AnyCtx, Ctx, GlobalScope, Handler, KeyParts, Last, ResumablePrincipal, Reuse, StagedCtx,
        TenantScope, UserScope, fingerprint, refused, run, run_staged, staged_result,
    };
    pub use crate::spec::{
        ExpiryPolicy, InFlightPolicy, KeyPart, KeyRequirement, KeySource, Mode, OperationSpec,
        ScopeKind,
    };
    pub use axum::response::{IntoResponse, Response};
    pub use core::time::Duration;
    pub use inventory;
    pub use std::boxed::Box;

    use crate::fingerprint::{Input, part};

    /// One input part, as the expansion lists them (a function, not a cast, so that the
    /// error for an argument that is not an input points at it).
    pub fn input<T: Input>(part: &T) -> &dyn DynInput {
        part
    }

    /// An input that is not the last argument must not read the body.
    pub fn not_body<T: Input>()
    where
        T::Part: part::NotBody,
    {
    }

    /// With `state = S`: the state provides an `Idem` of the transaction's backend.
    pub fn state<S: crate::IdemState<DB>, DB: crate::store::Backend>() {}

    /// With `state = S` and `scope = "tenant"`: the state's principal can name a tenant
    /// (evaluated at compile time, in an inline `const` block).
    pub const fn principal_names_tenant<S: crate::IdemState<DB>, DB: crate::store::Backend>() {
        assert!(
            <S::Principal as crate::Principal>::NAMES_TENANT,
            "`scope = \"tenant\"`: the state's principal never names a tenant (`Principal::NAMES_TENANT` is false, as for `Anonymous`); use your authentication extractor as `IdemState::Principal`, or `scope = \"global\"`"
        );
    }

    /// With `state = S` and `scope = "user"`: the state's principal can name a user.
    pub const fn principal_names_user<S: crate::IdemState<DB>, DB: crate::store::Backend>() {
        assert!(
            <S::Principal as crate::Principal>::NAMES_USER,
            "`scope = \"user\"`: the state's principal never names a user (`Principal::NAMES_USER` is false, as for `Anonymous`); use your authentication extractor as `IdemState::Principal`, or `scope = \"global\"`"
        );
    }

    /// With `state = S`: an extractor before the last works with the state.
    pub fn parts_extractor<T: axum::extract::FromRequestParts<S>, S>() {}

    /// With `state = S` and `mode = "staged"`: the state's principal can be stored with the
    /// key, for the reconciler to resume the handler without its client.
    pub fn resumable<S: crate::IdemState<DB>, DB: crate::store::Backend>()
    where
        S::Principal: ResumablePrincipal,
    {
    }

    /// With `state = S`: the last extractor `T` works with the state, checked by
    /// `Extractor::<T, S>::NEW.last_extractor()` (with [`LastExtractor`] in scope).
    ///
    /// A method, so that idem's own body extractors with a requirement of their own on the
    /// state have an inherent `last_extractor` that reports that requirement in its words
    /// (`Verified`: a `WebhookSecret`); every other extractor takes the trait's, which asks
    /// for `FromRequest<S, _>`. Decided by type, so aliases are seen through; a generic `T`
    /// takes the trait's.
    #[derive(Debug)]
    pub struct Extractor<T, S>(core::marker::PhantomData<fn() -> (T, S)>);

    impl<T, S> Extractor<T, S> {
        /// The probe.
        pub const NEW: Self = Self(core::marker::PhantomData);
    }

    /// See [`Extractor`].
    pub trait LastExtractor<T, S> {
        /// `T` is an extractor of the body (or of the parts) with the state `S`.
        fn last_extractor<M>(&self)
        where
            T: axum::extract::FromRequest<S, M>,
        {
        }
    }

    impl<T, S> LastExtractor<T, S> for Extractor<T, S> {}

    impl<T, S> Extractor<T, S> {
        /// `T`, not the last extractor, works with the state `S` ([`parts_extractor`], as a
        /// method for [`StateChecks`]).
        pub fn parts_extractor(&self)
        where
            T: axum::extract::FromRequestParts<S>,
        {
        }
    }

    /// Without `state = …`: a handler's `State<S>` argument, probed for the state to check
    /// the handler against. `(&StateArg::<S, DB>::NEW).checks()` is [`IdemStateArg::checks`]
    /// when `S` is an `IdemState<DB>` — then `S` is taken for the router's state, and checked
    /// as `state = S` checks it (a staged principal to store, every extractor with `S`) — and
    /// [`OtherStateArg::checks`], which checks nothing, otherwise: a sub-state taken with
    /// `FromRef` (`State<Prices>`) is not the router's state and says nothing of it. Decided
    /// by trait (autoref: the first takes `&StateArg`, the second `&&StateArg`), so aliases
    /// are seen through and a generic state is checked under the handler's bounds.
    #[derive(Debug)]
    pub struct StateArg<S, DB>(core::marker::PhantomData<fn() -> (S, DB)>);

    impl<S, DB> StateArg<S, DB> {
        /// The probe.
        pub const NEW: Self = Self(core::marker::PhantomData);
    }

    /// See [`StateArg`]: `S` is an `IdemState<DB>`.
    pub trait IdemStateArg<S, DB> {
        /// The checks of the state `S`.
        fn checks(&self) -> StateChecks<S, DB> {
            StateChecks(core::marker::PhantomData)
        }
    }

    impl<S, DB> IdemStateArg<S, DB> for StateArg<S, DB>
    where
        S: crate::IdemState<DB>,
        DB: crate::store::Backend,
    {
    }

    /// See [`StateArg`]: `S` is not an `IdemState<DB>`.
    pub trait OtherStateArg {
        /// No checks.
        fn checks(&self) -> NoChecks {
            NoChecks
        }
    }

    impl<S, DB> OtherStateArg for &StateArg<S, DB> {}

    /// The checks of a state `S` found in a `State<S>` argument, as `state = S` makes them.
    #[derive(Debug)]
    pub struct StateChecks<S, DB>(core::marker::PhantomData<fn() -> (S, DB)>);

    impl<S: crate::IdemState<DB>, DB: crate::store::Backend> StateChecks<S, DB> {
        /// A staged handler's: the state's principal can be stored ([`resumable`]).
        pub fn resumable(&self)
        where
            S::Principal: ResumablePrincipal,
        {
        }

        /// The probe of an extractor `T` with the state: `.parts_extractor()`, or
        /// `.last_extractor()` (with [`LastExtractor`] in scope), as with `state = S`.
        pub fn extractor<T>(&self) -> Extractor<T, S> {
            Extractor::NEW
        }
    }

    /// What [`OtherStateArg::checks`] gives: the same methods as [`StateChecks`], checking
    /// nothing.
    #[derive(Debug)]
    pub struct NoChecks;

    impl NoChecks {
        /// Nothing.
        pub fn resumable(&self) {}

        /// Nothing to check either.
        pub fn extractor<T>(&self) -> Self {
            Self
        }

        /// Nothing.
        pub fn parts_extractor(&self) {}

        /// Nothing.
        pub fn last_extractor(&self) {}
    }

    #[cfg(feature = "standard-webhooks")]
    impl<E, S> Extractor<crate::webhooks::Verified<E>, S> {
        /// `Verified<E>` with the state `S`: the state gives a `WebhookSecret`, and `E`
        /// extracts the body.
        pub fn last_extractor<M>(&self)
        where
            S: crate::webhooks::WebhookState,
            E: axum::extract::FromRequest<S, M>,
        {
        }
    }

    /// Names the backend of a handler's transaction argument.
    #[diagnostic::on_unimplemented(
        message = "the transaction argument of an `#[idempotent]` handler must be `&mut sqlx::Transaction<'_, DB>`",
        label = "not a `sqlx::Transaction` of a backend idem supports",
        note = "DB is `sqlx::Postgres`, `sqlx::MySql` or `sqlx::Sqlite`, each with the feature of its name (`postgres`, `mysql`, `sqlite`)"
    )]
    pub trait TxArg {
        /// The backend.
        type Db: crate::store::Backend;
    }

    impl<DB: crate::store::Backend> TxArg for sqlx::Transaction<'static, DB> {
        type Db = DB;
    }

    /// The `Attempt` argument of a staged handler, and the backend it names.
    #[diagnostic::on_unimplemented(
        message = "a staged `#[idempotent]` handler's `Attempt` argument must be `idem_runtime::staged::Attempt<DB>`",
        label = "not an `idem_runtime::staged::Attempt`",
        note = "DB is `sqlx::Postgres`, `sqlx::MySql` or `sqlx::Sqlite`, each with the feature of its name (`postgres`, `mysql`, `sqlite`)"
    )]
    pub trait AttemptArg {
        /// The backend.
        type Db: crate::store::Backend;
    }

    impl<DB: crate::store::Backend> AttemptArg for crate::staged::Attempt<DB> {
        type Db = DB;
    }
}
