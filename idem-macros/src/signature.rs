//! The handler's signature: which argument is the transaction, which are the input.

use syn::visit_mut::VisitMut;
use syn::{FnArg, ItemFn, Lifetime, Pat, Type, TypeReference};

use crate::args::Errors;

/// Types whose value is fingerprinted without being marked `#[input]`.
const INPUT_TYPES: &[&str] = &["Json", "Form", "Query", "Path"];

pub(crate) enum Role {
    /// The `&mut` argument: gets the key's transaction.
    Transaction,
    /// Fingerprinted extractor.
    Input,
    /// Any other extractor, passed through.
    Other,
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

/// Reads the signature and removes the `#[input]` markers from `item`.
pub(crate) fn analyse(item: &mut ItemFn, errors: &mut Errors) -> Option<Signature> {
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
        let before = arg.attrs.len();
        arg.attrs.retain(|a| !a.path().is_ident("input"));
        let marked = arg.attrs.len() != before;
        let role = match &*arg.ty {
            Type::Reference(TypeReference {
                mutability: Some(_),
                elem,
                ..
            }) => {
                if transaction.is_some() {
                    errors.push(syn::Error::new_spanned(
                        &arg.ty,
                        "only one argument may be the transaction (`&mut`); \
                         extractors are taken by value",
                    ));
                }
                let mut ty = (**elem).clone();
                StaticLifetimes.visit_type_mut(&mut ty);
                transaction = Some(ty);
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
            ty if marked || is_input_type(ty) => Role::Input,
            _ => Role::Other,
        };
        if let (Role::Transaction, Pat::Ident(_) | Pat::Wild(_)) = (&role, &*arg.pat) {
        } else if matches!(role, Role::Transaction) {
            errors.push(syn::Error::new_spanned(
                &arg.pat,
                "bind the transaction to a name, such as `tx: &mut Transaction<'_, DB>`",
            ));
        }
        arguments.push(Argument {
            role,
            ty: (*arg.ty).clone(),
        });
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

fn is_input_type(ty: &Type) -> bool {
    match ty {
        Type::Path(path) => path
            .path
            .segments
            .last()
            .is_some_and(|s| INPUT_TYPES.iter().any(|name| s.ident == name)),
        _ => false,
    }
}

struct StaticLifetimes;

impl VisitMut for StaticLifetimes {
    fn visit_lifetime_mut(&mut self, lifetime: &mut Lifetime) {
        *lifetime = Lifetime::new("'static", lifetime.span());
    }
}
