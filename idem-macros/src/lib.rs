//! The `#[idempotent]` attribute of idem.
//!
//! This crate only parses the attribute and the handler's signature and emits a thin call
//! into `idem_runtime::__private`; all behaviour lives in `idem-runtime`, which re-exports
//! the attribute and documents it. Depend on `idem-runtime` alone.
//!
//! The expansion names only `::idem_runtime::__private` items, `::core` and `::std`; the
//! runtime depends on exactly this crate's version, so `__private` may change between
//! versions.
#![warn(missing_docs, unreachable_pub)]
#![cfg_attr(docsrs, feature(doc_cfg))]

mod args;
mod body;
mod expand;
mod problems;
mod signature;
#[cfg(test)]
mod tests;

use proc_macro::TokenStream;

/// Makes an axum handler safe to retry. Documented in `idem_runtime::idempotent`.
#[proc_macro_attribute]
pub fn idempotent(args: TokenStream, item: TokenStream) -> TokenStream {
    expand::expand(args.into(), item.into()).into()
}
