//! The expansion: the user's handler becomes a nested function, wrapped by an axum handler
//! of the same name that runs the protocol through `idem_runtime::__private::run`.

use proc_macro2::{Span, TokenStream};
use quote::{format_ident, quote, quote_spanned};
use syn::spanned::Spanned as _;
use syn::{GenericParam, ItemFn, LitStr, ReturnType};

use crate::args::{Args, Errors, Scope};
use crate::signature::{self, Role};

pub(crate) fn expand(args: TokenStream, item: TokenStream) -> TokenStream {
    let mut item: ItemFn = match syn::parse2(item.clone()) {
        Ok(item) => item,
        Err(error) => {
            let error = syn::Error::new(
                error.span(),
                "`#[idempotent]` goes on an `async fn` handler",
            )
            .to_compile_error();
            return quote!(#error #item);
        }
    };
    let original = item.clone();
    let mut errors = Errors::default();
    let args = Args::parse(args, &mut errors);
    let signature = signature::analyse(&mut item, &mut errors);
    match (errors.finish(), args, signature) {
        (Ok(()), Some(args), Some(signature)) => emit(&args, &signature, item),
        (result, _, _) => {
            // Keep the user's function so the rest of the crate still compiles.
            let error = result.err().map(|e| e.to_compile_error());
            let mut original = original;
            strip_input_markers(&mut original);
            quote!(#error #original)
        }
    }
}

fn strip_input_markers(item: &mut ItemFn) {
    for input in &mut item.sig.inputs {
        if let syn::FnArg::Typed(arg) = input {
            arg.attrs.retain(|a| !a.path().is_ident("input"));
        }
    }
}

fn emit(args: &Args, signature: &signature::Signature, item: ItemFn) -> TokenStream {
    let rt = quote!(::idem_runtime::__private);
    let ItemFn {
        attrs,
        vis,
        sig,
        block,
    } = item;
    let name = &sig.ident;
    let (_, _, where_clause) = sig.generics.split_for_impl();
    // The wrapper keeps the type and const parameters; lifetimes can only have named the
    // transaction's, which the wrapper does not take.
    let mut generics = sig.generics.clone();
    generics.params = generics
        .params
        .into_iter()
        .filter(|p| !matches!(p, GenericParam::Lifetime(_)))
        .collect();
    let generics = &generics;

    let operation = args.operation.clone().unwrap_or_else(|| name.to_string());
    let id = LitStr::new(&format!("{operation}:v{}", args.version), Span::call_site());
    let ttl = args.ttl_secs;
    let (scope_kind, scope_marker) = match args.scope {
        Scope::Global => (quote!(Global), quote!(GlobalScope)),
        Scope::Tenant => (quote!(Tenant), quote!(TenantScope)),
        Scope::User => (quote!(User), quote!(UserScope)),
    };
    let on_expired = if args.reexecute {
        quote!(Reexecute)
    } else {
        quote!(Gone)
    };
    let key = if args.key_optional {
        quote!(Optional)
    } else {
        quote!(Required)
    };
    let store_client_errors = args.store_client_errors;
    let exclude = &args.exclude;

    let tx_ty = &signature.transaction;
    let db = quote!(<#tx_ty as #rt::TxArg>::Db);
    let mut params = Vec::new();
    let mut call = Vec::new();
    let mut inputs = Vec::new();
    for (i, argument) in signature.arguments.iter().enumerate() {
        // The argument's span, so that trait errors about it point at the user's type.
        let ident = format_ident!("__idem_arg{}", i, span = argument.ty.span());
        match argument.role {
            Role::Transaction => call.push(quote!(__idem_tx)),
            Role::Input | Role::Other => {
                let ty = &argument.ty;
                params.push(quote!(#ident: #ty));
                if matches!(argument.role, Role::Input) {
                    // Spanned on the argument's type: "`X` is not an `Input`" points there.
                    inputs.push(quote_spanned!(ty.span()=>
                        ::idem_runtime::__private::input(&#ident)
                    ));
                }
                call.push(quote!(#ident));
            }
        }
    }

    let into_response = match &sig.output {
        ReturnType::Type(_, ty) => {
            quote_spanned!(ty.span()=> ::idem_runtime::__private::IntoResponse::into_response)
        }
        ReturnType::Default => quote!(#rt::IntoResponse::into_response),
    };
    let mut inner_sig = sig.clone();
    inner_sig.ident = format_ident!("__idem_handler");
    let doc = format!(
        "\n\n**Idempotent** operation `{}`: send an `Idempotency-Key` header{}; keys are \
         unique per {} and kept {}. A retry with the same key and request replays the \
         stored response (`Idempotent-Replayed: true`).",
        id.value(),
        if args.key_optional { " (optional)" } else { "" },
        match args.scope {
            Scope::Global => "operation",
            Scope::Tenant => "tenant",
            Scope::User => "user",
        },
        human_duration(ttl),
    );

    quote! {
        #(#attrs)*
        #[doc = #doc]
        #vis async fn #name #generics (
            __idem_ctx: #rt::Ctx<#db, #rt::#scope_marker>,
            #(#params),*
        ) -> #rt::Response #where_clause {
            // `async` is required by the attribute even where the body awaits nothing.
            #[allow(clippy::too_many_arguments, clippy::unused_async)]
            #inner_sig #block

            static __IDEM_SPEC: #rt::OperationSpec = #rt::OperationSpec {
                id: #id,
                ttl: #rt::Duration::from_secs(#ttl),
                scope: #rt::ScopeKind::#scope_kind,
                on_expired: #rt::ExpiryPolicy::#on_expired,
                key: #rt::KeyRequirement::#key,
                store_client_errors: #store_client_errors,
                fingerprint_exclude: &[#(#exclude),*],
            };
            let __idem_fingerprint = #rt::fingerprint(&__IDEM_SPEC, &[#(#inputs),*]);
            #rt::run(__idem_ctx, &__IDEM_SPEC, __idem_fingerprint, move |__idem_tx| {
                #rt::Box::pin(async move {
                    #into_response(__idem_handler(#(#call),*).await)
                })
            })
            .await
        }
    }
}

fn human_duration(secs: u64) -> String {
    match secs {
        s if s % 86_400 == 0 => format!("{} day(s)", s / 86_400),
        s if s % 3600 == 0 => format!("{} hour(s)", s / 3600),
        s if s % 60 == 0 => format!("{} minute(s)", s / 60),
        s => format!("{s} second(s)"),
    }
}
