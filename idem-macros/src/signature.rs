//! The handler's signature: which argument is the transaction, which are extractors.
//!
//! Whether an extractor is part of the request's input is *not* decided here: a proc macro
//! sees only how a type is spelled, not what it is (aliases, wrappers and custom extractors
//! look alike). The expansion asks the compiler instead, through the runtime's `Input` trait.

use syn::visit_mut::VisitMut;
use syn::{
    Attribute, FnArg, GenericArgument, ItemFn, Lifetime, Pat, PatType, PathArguments, Type,
    TypeReference,
};

use crate::args::Errors;

/// The attribute on an argument that says it is not part of the request's meaning.
pub(crate) const NOT_INPUT: &str = "not_input";

pub(crate) enum Role {
    /// The `&mut` argument: gets the key's transaction.
    Transaction,
    /// An extractor. `ignored`: marked `#[not_input]`.
    Extractor { ignored: bool },
}

pub(crate) struct Argument {
    pub role: Role,
    pub ty: Type,
}

pub(crate) struct Signature {
    pub arguments: Vec<Argument>,
    /// The transaction's type with every lifetime made `'static`.
    pub transaction: Type,
}

/// Whether `ty` names staged mode's `Attempt` (by its last path segment: `Attempt<DB>`,
/// `idem_runtime::staged::Attempt<DB>`).
fn is_attempt(ty: &Type) -> bool {
    last_segment(ty).is_some_and(|s| s.ident == "Attempt")
}

/// The last segment of a path type (`State` of `axum::extract::State<T>`), with no `<T as …>`.
fn last_segment(ty: &Type) -> Option<&syn::PathSegment> {
    match ty {
        Type::Path(path) if path.qself.is_none() => path.path.segments.last(),
        _ => None,
    }
}

/// `T`, when `ty` is spelled `State<T>` (by its last path segment: `State<AppState<DB>>`,
/// `axum::extract::State<T>`). Only a hint, for the checks of a handler whose attribute does
/// not name the state: whether `T` is the router's state is left to the compiler.
pub(crate) fn state_argument(ty: &Type) -> Option<&Type> {
    let segment = last_segment(ty).filter(|s| s.ident == "State")?;
    let PathArguments::AngleBracketed(arguments) = &segment.arguments else {
        return None;
    };
    let mut arguments = arguments.args.iter();
    match (arguments.next(), arguments.next()) {
        (Some(GenericArgument::Type(state)), None) => Some(state),
        _ => None,
    }
}

/// Whether `ty` is spelled `Verified<…>` (by its last path segment, as
/// `idem_runtime::webhooks::Verified<E>`): the handler receives Standard Webhooks deliveries,
/// which its documents describe. A type alias of it is not seen.
pub(crate) fn is_verified(ty: &Type) -> bool {
    last_segment(ty).is_some_and(|s| s.ident == "Verified")
}

/// Reads the signature and removes idem's argument attributes from `item`.
///
/// `staged`: the handler takes an `Attempt<DB>` (by value) where an atomic one takes its
/// transaction; [`Role::Transaction`] and [`Signature::transaction`] then stand for it.
pub(crate) fn analyse(item: &mut ItemFn, errors: &mut Errors, staged: bool) -> Option<Signature> {
    if item.sig.asyncness.is_none() {
        errors.push(syn::Error::new_spanned(
            item.sig.fn_token,
            "`#[idempotent]` handlers must be `async fn`",
        ));
    }
    let mut arguments = Vec::new();
    let mut transaction: Option<Type> = None;
    for input in &mut item.sig.inputs {
        let arg = match input {
            FnArg::Receiver(receiver) => {
                errors.push(syn::Error::new_spanned(
                    receiver,
                    "`#[idempotent]` handlers are free functions; `self` is not an extractor",
                ));
                continue;
            }
            FnArg::Typed(arg) => arg,
        };
        let not_input = take_argument_attributes(arg, errors);
        let role = role(
            &arg.ty,
            staged,
            not_input.is_some(),
            &mut transaction,
            errors,
        );
        if matches!(role, Role::Transaction) {
            check_transaction_argument(arg, not_input.as_ref(), errors);
        }
        arguments.push(Argument {
            role,
            ty: (*arg.ty).clone(),
        });
    }
    if staged && transaction.is_none() {
        errors.push(syn::Error::new_spanned(
            &item.sig.ident,
            "a staged `#[idempotent]` handler needs an `attempt: Attempt<DB>` argument \
             (`idem_runtime::staged::Attempt`): its steps are journaled through it",
        ));
        return None;
    }
    let Some(transaction) = transaction else {
        errors.push(syn::Error::new_spanned(
            &item.sig.ident,
            "an `#[idempotent]` handler needs a transaction argument, such as \
             `tx: &mut sqlx::Transaction<'_, Postgres>`: the handler's writes commit in it together \
             with the stored response",
        ));
        return None;
    };
    Some(Signature {
        arguments,
        transaction,
    })
}

/// Removes idem's attributes from an argument: returns its `#[not_input]`, and refuses
/// `#[input]`, which is not needed.
fn take_argument_attributes(arg: &mut PatType, errors: &mut Errors) -> Option<Attribute> {
    let mut not_input = None;
    let mut kept = Vec::new();
    for attr in std::mem::take(&mut arg.attrs) {
        if attr.path().is_ident(NOT_INPUT) {
            not_input = Some(attr);
        } else if attr.path().is_ident("input") {
            errors.push(syn::Error::new_spanned(
                &attr,
                "`#[input]` is not needed: an extractor is part of the fingerprint when \
                 its type implements `idem_runtime::Input`",
            ));
        } else {
            kept.push(attr);
        }
    }
    arg.attrs = kept;
    not_input
}

/// What an argument of type `ty` is: the transaction (the `Attempt`, staged), recorded in
/// `transaction`, or an extractor. A reference that cannot be the transaction is reported,
/// and counted as it, so that no "missing transaction" error follows.
fn role(
    ty: &Type,
    staged: bool,
    not_input: bool,
    transaction: &mut Option<Type>,
    errors: &mut Errors,
) -> Role {
    match ty {
        ty if staged && is_attempt(ty) => {
            if transaction.is_some() {
                errors.push(syn::Error::new_spanned(
                    ty,
                    "only one argument may be the `Attempt`",
                ));
            }
            *transaction = Some(ty.clone());
            Role::Transaction
        }
        Type::Reference(reference) if staged => {
            errors.push(syn::Error::new_spanned(
                reference,
                "a staged handler takes `attempt: Attempt<DB>` instead of a transaction: \
                 its steps open their own (`attempt.db_step`, `attempt.finish`)",
            ));
            // (Standing in for the `Attempt`, so that this is the only error.)
            transaction.get_or_insert_with(|| (*reference.elem).clone());
            Role::Transaction
        }
        Type::Reference(TypeReference {
            mutability: Some(_),
            elem,
            ..
        }) => {
            if transaction.is_some() {
                errors.push(syn::Error::new_spanned(
                    ty,
                    "only one argument may be the transaction (`&mut`); \
                     extractors are taken by value",
                ));
            }
            let mut ty = (**elem).clone();
            StaticLifetimes.visit_type_mut(&mut ty);
            *transaction = Some(ty);
            Role::Transaction
        }
        Type::Reference(reference) => {
            // Most likely the transaction with `&` for `&mut`: say so, and count it as
            // the transaction so that no "missing transaction" error follows.
            errors.push(syn::Error::new_spanned(
                reference,
                "the transaction is taken by `&mut` (`tx: &mut Transaction<'_, DB>`); \
                 extractors are taken by value",
            ));
            transaction.get_or_insert_with(|| (*reference.elem).clone());
            Role::Transaction
        }
        _ => Role::Extractor { ignored: not_input },
    }
}

/// The transaction's argument: never `#[not_input]`, and bound to a name.
fn check_transaction_argument(arg: &PatType, not_input: Option<&Attribute>, errors: &mut Errors) {
    if let Some(attr) = not_input {
        errors.push(syn::Error::new_spanned(
            attr,
            "`#[not_input]` goes on extractors; the transaction is never an input",
        ));
    }
    if !matches!(&*arg.pat, Pat::Ident(_) | Pat::Wild(_)) {
        errors.push(syn::Error::new_spanned(
            &arg.pat,
            "bind the transaction to a name, such as `tx: &mut Transaction<'_, DB>`",
        ));
    }
}

struct StaticLifetimes;

impl VisitMut for StaticLifetimes {
    fn visit_lifetime_mut(&mut self, lifetime: &mut Lifetime) {
        *lifetime = Lifetime::new("'static", lifetime.span());
    }
}
