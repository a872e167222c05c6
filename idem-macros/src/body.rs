//! The request's body, for the generated documentation: the handler's last extractor,
//! probed at its type for the body it reads (`__private::BodyProbe`).
//!
//! The probe is a closure in the handler's registration, a `static`, which cannot name the
//! handler's generic parameters: a last extractor whose type names one (`JsonBody<T>`, an
//! `impl Trait`, a lifetime of the handler's) is not probed, and its body is left
//! undescribed.

use proc_macro2::TokenStream;
use quote::{quote, quote_spanned};
use syn::spanned::Spanned as _;
use syn::visit_mut::{self, VisitMut};
use syn::{Generics, Ident, Lifetime, Path, Type, TypeImplTrait};

use crate::signature::{Role, Signature};

/// `|| …`: the closure the registration's `request_body` holds, which probes the handler's
/// last extractor for the body it reads; `None` when there is none, or it cannot be probed.
pub(crate) fn request_body(signature: &Signature, generics: &Generics) -> TokenStream {
    let last = signature
        .arguments
        .iter()
        .rfind(|a| matches!(a.role, Role::Extractor { .. }))
        .map(|a| &a.ty)
        .filter(|ty| !names_generics(ty, generics));
    let Some(ty) = last else {
        return quote!(|| ::core::option::Option::None);
    };
    let probe = quote_spanned!(ty.span()=>
        (&&&::idem_runtime::__private::BodyProbe::<#ty>::NEW).request_body()
    );
    quote! {
        || {
            #[allow(unused_imports)]
            use ::idem_runtime::__private::{
                ExtractorBody as _, NoBody as _, SchemaBody as _,
            };
            #probe
        }
    }
}

/// Whether `ty` names one of the handler's generic parameters (or `Self`, an `impl Trait`,
/// a lifetime other than `'static`), which a `static` cannot.
fn names_generics(ty: &Type, generics: &Generics) -> bool {
    let mut visitor = NamesGenerics {
        names: generics
            .type_params()
            .map(|p| p.ident.clone())
            .chain(generics.const_params().map(|p| p.ident.clone()))
            .collect(),
        found: false,
    };
    // The visitor only reads (`VisitMut` is the visitor syn is built with here).
    visitor.visit_type_mut(&mut ty.clone());
    visitor.found
}

struct NamesGenerics {
    names: Vec<Ident>,
    found: bool,
}

impl VisitMut for NamesGenerics {
    fn visit_path_mut(&mut self, path: &mut Path) {
        if let Some(first) = path.segments.first()
            && (first.ident == "Self" || self.names.contains(&first.ident))
        {
            self.found = true;
        }
        visit_mut::visit_path_mut(self, path);
    }

    fn visit_lifetime_mut(&mut self, lifetime: &mut Lifetime) {
        if lifetime.ident != "static" {
            self.found = true;
        }
    }

    fn visit_type_impl_trait_mut(&mut self, _: &mut TypeImplTrait) {
        self.found = true;
    }
}
