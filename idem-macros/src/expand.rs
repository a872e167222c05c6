//! The expansion: the user's handler becomes a nested function, wrapped by an axum handler
//! of the same name that runs the protocol through `idem_runtime::__private::run`.
//!
//! Besides the call, the wrapper holds checks that make mistakes compile errors at the
//! handler, in idem's words (as `axum::debug_handler` does): every extractor must be an
//! `Input` or marked `#[not_input]`, a body extractor must come last, and — when the
//! attribute names the state (`state = AppState`) — the state must be an `IdemState` of the
//! transaction's backend (whose principal a staged handler can store with its key) and
//! every extractor must work with it. Without `state = …`, a `State<T>` argument whose `T`
//! is an `IdemState` of that backend stands for it (the principal and the extractors are
//! checked against `T`); a `T` that is not (a sub-state taken with `FromRef`) is not checked.

use proc_macro2::{Span, TokenStream};
use quote::{format_ident, quote, quote_spanned};
use syn::spanned::Spanned as _;
use syn::{FnArg, GenericParam, Generics, ItemFn, LitStr, ReturnType, Token, Type};

use idem_docs::{OperationDoc, ProblemDoc, contract};
use idem_spec::{KeyPart, Mode, OperationSpec, ScopeKind};

use crate::args::{Args, Errors};
use crate::body;
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
    let mut errors = Errors::default();
    let args = Args::parse(args, &item.sig.ident, &mut errors);
    let staged = args.as_ref().is_some_and(|a| a.spec.mode == Mode::Staged);
    let signature = signature::analyse(&mut item, &mut errors, staged);
    match (errors.finish(), args, signature) {
        (Ok(()), Some(args), Some(signature)) => emit(&args, &signature, item),
        (result, _, _) => {
            let error = result.err().map(|e| e.to_compile_error());
            let stub = stub(&item);
            quote!(#error #stub)
        }
    }
}

/// The wrapper's generics: the handler's type and const parameters. Lifetimes can only have
/// named the transaction's, which the wrapper does not take.
fn wrapper_generics(generics: &Generics) -> Generics {
    let mut generics = generics.clone();
    generics.params = generics
        .params
        .into_iter()
        .filter(|p| !matches!(p, GenericParam::Lifetime(_)))
        .collect();
    generics
}

/// What is emitted when the attribute or the signature is wrong: the error, and a handler of
/// the same name and generics that axum accepts with any state, so that the router compiles
/// and the error above stays the only one.
///
/// The handler itself is kept inside the stub, unused (and `async`, whatever the mistake),
/// so that what its signature and body name stays used: no "unused import" warning follows
/// the error.
fn stub(item: &ItemFn) -> TokenStream {
    let ItemFn {
        attrs,
        vis,
        sig,
        block,
    } = item;
    let name = &sig.ident;
    let generics = wrapper_generics(&sig.generics);
    let where_clause = &generics.where_clause;
    let has_receiver = sig.inputs.iter().any(|a| matches!(a, FnArg::Receiver(_)));
    let handler = (!has_receiver).then(|| {
        let mut sig = sig.clone();
        sig.ident = format_ident!("__idem_unused");
        sig.asyncness = Some(Token![async](sig.fn_token.span));
        quote! {
            #[allow(dead_code, clippy::too_many_arguments, clippy::unused_async)]
            #sig #block
        }
    });
    quote! {
        #(#attrs)*
        #[allow(clippy::unused_async)]
        #vis async fn #name #generics () -> ::idem_runtime::__private::Response #where_clause {
            #handler
            ::core::unreachable!("`#[idempotent]` reported an error at compile time")
        }
    }
}

/// `::idem_runtime::__private`, the path every emitted item is named by.
fn rt() -> TokenStream {
    quote!(::idem_runtime::__private)
}

/// The wrapper: the handler nested in an axum handler of the same name, which takes the
/// context and the extractors, checks them, declares the operation's spec and registers it,
/// then runs the handler through the protocol.
fn emit(args: &Args, signature: &signature::Signature, item: ItemFn) -> TokenStream {
    let rt = rt();
    let ItemFn {
        attrs,
        vis,
        sig,
        block,
    } = item;
    let name = &sig.ident;
    let generics = wrapper_generics(&sig.generics);
    let where_clause = &generics.where_clause;
    let staged = args.spec.mode == Mode::Staged;
    let (key_param, key_ctx) = key_from_request(&args.spec);
    let db = backend(&signature.transaction, staged);
    let ctx = context(args.spec.scope, &signature.transaction, &db, staged);
    let Wiring {
        params,
        call,
        inputs,
        mut checks,
        extractor_checks,
        last_arg,
    } = wiring(args, signature, staged);
    match &args.state {
        None => checks.extend(state_argument_checks(
            signature,
            &db,
            staged,
            &extractor_checks,
        )),
        Some(state) => checks.extend(named_state_checks(args, state, &db, &sig.generics)),
    }
    let run = run(&sig.output, &call, staged);
    let mut inner_sig = sig.clone();
    inner_sig.ident = format_ident!("__idem_handler");
    let verified_webhook = signature
        .arguments
        .iter()
        .any(|a| matches!(a.role, Role::Extractor { .. }) && signature::is_verified(&a.ty));
    let doc = rustdoc(args, verified_webhook);
    let spec = spec_static(&args.spec);
    let request_body = body::request_body(signature, &sig.generics);
    let registration = registration(args, name, verified_webhook, &request_body);

    quote! {
        #(#attrs)*
        #[doc = #doc]
        #vis async fn #name #generics (
            __idem_ctx: #ctx,
            #key_param
            #(#params),*
        ) -> #rt::Response #where_clause {
            // `async` is required by the attribute even where the body awaits nothing.
            #[allow(clippy::too_many_arguments, clippy::unused_async)]
            #inner_sig #block

            #(#checks)*
            #spec
            // Registered at link time, for the generated documentation (`idem_runtime::docs`).
            #registration
            #key_ctx
            #last_arg
            let __idem_fingerprint = #rt::fingerprint(&__IDEM_SPEC, &[#(#inputs),*]);
            #run
        }
    }
}

/// The scope's `ScopeKind` variant and the `__private` marker type of the context.
fn scope_names(scope: ScopeKind) -> (TokenStream, TokenStream) {
    match scope {
        ScopeKind::Tenant => (quote!(Tenant), quote!(TenantScope)),
        ScopeKind::User => (quote!(User), quote!(UserScope)),
        _ => (quote!(Global), quote!(GlobalScope)),
    }
}

/// `static __IDEM_SPEC`: the operation's spec as the attribute describes it.
fn spec_static(spec: &OperationSpec) -> TokenStream {
    let rt = rt();
    let id = LitStr::new(spec.id, Span::call_site());
    let ttl = spec.ttl.as_secs();
    let (scope_kind, _) = scope_names(spec.scope);
    let on_expired = format_ident!("{}", variant(spec.on_expired.as_str()));
    let key = format_ident!("{}", variant(spec.key.as_str()));
    let mode = format_ident!("{}", variant(spec.mode.as_str()));
    let store_client_errors = spec.store_client_errors;
    let mismatch_detail = spec.mismatch_detail;
    let exclude = spec.fingerprint_exclude;
    let lease = u64::try_from(spec.lease.as_millis()).unwrap_or(u64::MAX);
    let on_in_flight = format_ident!("{}", variant(spec.on_in_flight.as_str()));
    let key_parts = spec.key_source.parts();
    let key_from = (!key_parts.is_empty()).then(|| {
        let parts = key_parts.iter().map(|part| match part {
            KeyPart::Header(name) => quote!(#rt::KeyPart::Header(#name)),
            KeyPart::Body(pointer) => quote!(#rt::KeyPart::Body(#pointer)),
        });
        quote!(.key_from(#rt::KeySource::Parts(&[#(#parts),*])))
    });
    quote! {
        static __IDEM_SPEC: #rt::OperationSpec = #rt::OperationSpec::new(#id)
            .ttl(#rt::Duration::from_secs(#ttl))
            .scope(#rt::ScopeKind::#scope_kind)
            .on_expired(#rt::ExpiryPolicy::#on_expired)
            .key(#rt::KeyRequirement::#key)
            #key_from
            .mode(#rt::Mode::#mode)
            .store_client_errors(#store_client_errors)
            .mismatch_detail(#mismatch_detail)
            .fingerprint_exclude(&[#(#exclude),*])
            .lease(#rt::Duration::from_millis(#lease))
            .on_in_flight(#rt::InFlightPolicy::#on_in_flight);
    }
}

/// A key taken from the request: the wrapper's parameter whose extractor reads its parts,
/// before the body extractor (which it asks to keep the body when a part is in it), and the
/// statement handing them to the context. Nothing for the `Idempotency-Key` header.
fn key_from_request(spec: &OperationSpec) -> (Option<TokenStream>, Option<TokenStream>) {
    if spec.key_source.parts().is_empty() {
        return (None, None);
    }
    let rt = rt();
    (
        Some(quote!(__idem_key: #rt::KeyParts,)),
        Some(quote!(let __idem_ctx = __idem_ctx.key_from(__idem_key, &__IDEM_SPEC);)),
    )
}

/// The transaction's (or the `Attempt`'s) database, at the transaction's type.
fn backend(tx_ty: &Type, staged: bool) -> TokenStream {
    let rt = rt();
    if staged {
        quote_spanned!(tx_ty.span()=> <#tx_ty as #rt::AttemptArg>::Db)
    } else {
        quote_spanned!(tx_ty.span()=> <#tx_ty as #rt::TxArg>::Db)
    }
}

/// The context's type, the wrapper's first parameter. At the transaction's type too: when it
/// is not a transaction, the context's type is reported there, once, with the `TxArg` error,
/// not a second time at the attribute.
fn context(scope: ScopeKind, tx_ty: &Type, db: &TokenStream, staged: bool) -> TokenStream {
    let (_, scope_marker) = scope_names(scope);
    if staged {
        quote_spanned!(tx_ty.span()=>
            ::idem_runtime::__private::StagedCtx<#db, ::idem_runtime::__private::#scope_marker>
        )
    } else {
        quote_spanned!(tx_ty.span()=>
            ::idem_runtime::__private::Ctx<#db, ::idem_runtime::__private::#scope_marker>
        )
    }
}

/// What the handler's arguments make of the wrapper.
struct Wiring {
    /// The wrapper's parameters after the context and the key's parts: one per extractor.
    params: Vec<TokenStream>,
    /// The handler's arguments, in order.
    call: Vec<TokenStream>,
    /// The fingerprint's inputs: the extractors not marked `#[not_input]`.
    inputs: Vec<TokenStream>,
    /// The checks made at compile time.
    checks: Vec<TokenStream>,
    /// Without `state = …`: each extractor's check, made on the state of a `State<T>`
    /// argument ([`state_argument_checks`]).
    extractor_checks: Vec<TokenStream>,
    /// The last extractor taken out of its `Last`, its refusal answered by `refused`.
    last_arg: Option<TokenStream>,
}

/// Each argument's parameter of the wrapper, its place in the handler's call, its input and
/// its checks.
fn wiring(args: &Args, signature: &signature::Signature, staged: bool) -> Wiring {
    let rt = rt();
    let extractors = signature
        .arguments
        .iter()
        .filter(|a| matches!(a.role, Role::Extractor { .. }))
        .count();
    let mut wiring = Wiring {
        params: Vec::new(),
        call: Vec::new(),
        inputs: Vec::new(),
        checks: Vec::new(),
        extractor_checks: Vec::new(),
        last_arg: None,
    };
    let mut position = 0;
    for (i, argument) in signature.arguments.iter().enumerate() {
        let ty = &argument.ty;
        // The argument's span, so that errors about it point at the user's type.
        let ident = format_ident!("__idem_arg{}", i, span = ty.span());
        let Role::Extractor { ignored } = argument.role else {
            wiring.call.push(if staged {
                quote!(__idem_attempt)
            } else {
                quote!(__idem_tx)
            });
            continue;
        };
        position += 1;
        let last = position == extractors;
        if last {
            // Its refusal is kept: the key's answer may come first (`__private::refused`).
            wiring
                .params
                .push(quote_spanned!(ty.span()=> __idem_last: #rt::Last<#ty>));
            wiring.last_arg = Some(quote_spanned!(ty.span()=>
                let #ident = match __idem_last.0 {
                    ::core::result::Result::Ok(value) => value,
                    ::core::result::Result::Err(refusal) => {
                        return #rt::refused(__idem_ctx, &__IDEM_SPEC, refusal).await;
                    }
                };
            ));
        } else {
            wiring
                .params
                .push(quote_spanned!(ty.span()=> #rt::Reuse(#ident): #rt::Reuse<#ty>));
        }
        wiring.call.push(quote!(#ident));
        if !ignored {
            wiring
                .inputs
                .push(quote_spanned!(ty.span()=> #rt::input::<#ty>(&#ident)));
            if !last {
                wiring
                    .checks
                    .push(quote_spanned!(ty.span()=> #rt::not_body::<#ty>();));
            }
        }
        extractor_check(&mut wiring, args.state.as_ref(), ty, last);
    }
    wiring
}

/// The check that an extractor works with the state: with `state = …`, made on it at once;
/// without, kept for the state of a `State<T>` argument.
fn extractor_check(wiring: &mut Wiring, state: Option<&Type>, ty: &Type, last: bool) {
    let rt = rt();
    if let Some(state) = state {
        // A method (see `__private::Extractor`): idem's extractors with a requirement of
        // their own on the state report it in their words. Every token at the argument's
        // span, for the method's error to be reported there (at its first token).
        wiring.checks.push(if last {
            quote_spanned!(ty.span()=> {
                #[allow(unused_imports)]
                use ::idem_runtime::__private::LastExtractor as _;
                ::idem_runtime::__private::Extractor::<#ty, #state>::NEW.last_extractor();
            })
        } else {
            quote_spanned!(ty.span()=> #rt::parts_extractor::<#ty, #state>();)
        });
    } else {
        wiring.extractor_checks.push(if last {
            quote_spanned!(ty.span()=> __idem_state.extractor::<#ty>().last_extractor();)
        } else {
            quote_spanned!(ty.span()=> __idem_state.extractor::<#ty>().parts_extractor();)
        });
    }
}

/// Without `state = …`: a `State<T>` argument names a state; whether it is the router's (an
/// `IdemState` of the transaction's backend) or a sub-state taken with `FromRef` is decided
/// by the compiler (`__private::StateArg`): only the first is checked, as `state = T` would
/// check it, with every extractor's check.
fn state_argument_checks(
    signature: &signature::Signature,
    db: &TokenStream,
    staged: bool,
    extractor_checks: &[TokenStream],
) -> Vec<TokenStream> {
    let states = signature
        .arguments
        .iter()
        .filter(|a| matches!(a.role, Role::Extractor { .. }))
        .filter_map(|a| signature::state_argument(&a.ty));
    let mut checks = Vec::new();
    for state in states {
        let resumable = staged.then(|| quote_spanned!(state.span()=> __idem_state.resumable();));
        let probe = quote_spanned!(state.span()=>
            let __idem_state = (&::idem_runtime::__private::StateArg::<#state, #db>::NEW).checks();
        );
        checks.push(quote! {
            {
                #[allow(unused_imports)]
                use ::idem_runtime::__private::{
                    IdemStateArg as _, LastExtractor as _, OtherStateArg as _,
                };
                #probe
                #resumable
                #(#extractor_checks)*
            }
        });
    }
    checks
}

/// With `state = …`: the state is an `IdemState` of the transaction's backend, a staged
/// key's principal can be stored, and the principal can name the scope's owner.
fn named_state_checks(
    args: &Args,
    state: &Type,
    db: &TokenStream,
    generics: &Generics,
) -> Vec<TokenStream> {
    let rt = rt();
    let mut checks = vec![quote_spanned!(state.span()=> #rt::state::<#state, #db>();)];
    // A staged key is stored with its principal, for the reconciler to resume it.
    if args.spec.mode == Mode::Staged {
        checks.push(quote_spanned!(state.span()=> #rt::resumable::<#state, #db>();));
    }
    // A principal type that can never name the scope's owner: a compile error. A const
    // item is evaluated by `cargo check` too; it cannot name a generic backend, so a
    // handler generic over its types is not checked.
    if generics.type_params().next().is_none() {
        match args.spec.scope {
            ScopeKind::Tenant => checks.push(quote_spanned!(state.span()=>
                const _: () = #rt::principal_names_tenant::<#state, #db>();
            )),
            ScopeKind::User => checks.push(quote_spanned!(state.span()=>
                const _: () = #rt::principal_names_user::<#state, #db>();
            )),
            ScopeKind::Global => {}
        }
    }
    checks
}

/// The handler run through the protocol: `run` with its response, or `run_staged` with its
/// result. The call at the return type's span: a type that is not a response is reported
/// there.
fn run(output: &ReturnType, call: &[TokenStream], staged: bool) -> TokenStream {
    let rt = rt();
    if staged {
        let finished = match output {
            ReturnType::Type(_, ty) => quote_spanned!(ty.span()=>
                #rt::staged_result(__idem_handler(#(#call),*).await)
            ),
            ReturnType::Default => quote!(#rt::staged_result(__idem_handler(#(#call),*).await)),
        };
        return quote! {
            #rt::run_staged(__idem_ctx, &__IDEM_SPEC, __idem_fingerprint, move |__idem_attempt| {
                #rt::Box::pin(async move {
                    #finished
                })
            })
            .await
        };
    }
    let respond = match output {
        ReturnType::Type(_, ty) => quote_spanned!(ty.span()=>
            ::idem_runtime::__private::IntoResponse::into_response(
                __idem_handler(#(#call),*).await
            )
        ),
        ReturnType::Default => {
            quote!(#rt::IntoResponse::into_response(__idem_handler(#(#call),*).await))
        }
    };
    quote! {
        #rt::run(__idem_ctx, &__IDEM_SPEC, __idem_fingerprint, move |__idem_tx| {
            #rt::Box::pin(async move {
                #respond
            })
        })
        .await
    }
}

/// The operation's registration at link time (`inventory`), for the generated
/// documentation: its spec, its route, its handler, its own problems, the body it reads
/// (`request_body`, [`body::request_body`]) and where it is written.
fn registration(
    args: &Args,
    name: &syn::Ident,
    verified_webhook: bool,
    request_body: &TokenStream,
) -> TokenStream {
    let rt = rt();
    let handler_name = LitStr::new(&name.to_string(), Span::call_site());
    let (method, path) = match &args.route {
        Some((method, path)) => (
            quote!(::core::option::Option::Some(#method)),
            quote!(::core::option::Option::Some(#path)),
        ),
        None => (
            quote!(::core::option::Option::None),
            quote!(::core::option::Option::None),
        ),
    };
    let problems = args.problems.iter().map(|problem| {
        let ProblemDoc {
            status,
            type_uri,
            title,
            retry_after,
            ..
        } = problem;
        quote! {
            #rt::AnnotatedProblem {
                status: #status,
                type_uri: #type_uri,
                title: #title,
                retry_after: #retry_after,
            }
        }
    });
    quote! {
        #rt::inventory::submit! {
            #rt::AnnotatedHandler {
                spec: &__IDEM_SPEC,
                method: #method,
                path: #path,
                handler: #handler_name,
                verified_webhook: #verified_webhook,
                problems: &[#(#problems),*],
                request_body: #request_body,
                file: ::core::file!(),
                line: ::core::line!(),
            }
        }
    }
}

/// `gone` → `Gone`: the variant of a vocabulary word.
fn variant(word: &str) -> String {
    let mut chars = word.chars();
    chars
        .next()
        .map(|first| first.to_ascii_uppercase().to_string() + chars.as_str())
        .unwrap_or_default()
}

/// The "Idempotency" section appended to the handler's rustdoc, in the words of the
/// generated documents (`idem_docs::contract`).
fn rustdoc(args: &Args, verified_webhook: bool) -> String {
    let spec = &args.spec;
    let id = spec.id;
    let mut operation = OperationDoc::from_spec(spec);
    if let Some((method, path)) = &args.route {
        operation = operation.path(method, path);
    }
    if verified_webhook {
        operation = operation.verified_webhook();
    }
    for problem in &args.problems {
        operation = operation.problem(problem.clone());
    }
    let route = operation
        .route()
        .map(|route| format!(" (`{route}`)"))
        .unwrap_or_default();
    let statuses: Vec<String> = contract::statuses(&operation)
        .iter()
        .map(|s| format!("`{s}`"))
        .collect();
    let mut doc = format!(
        "\n\n# Idempotency\n\nIdempotent operation `{id}`{route}. {}\n\n{}",
        contract::summary(&operation),
        contract::window(&operation),
    );
    if !spec.fingerprint_exclude.is_empty() {
        let paths: Vec<String> = spec
            .fingerprint_exclude
            .iter()
            .map(|p| format!("`{p}`"))
            .collect();
        doc.push_str(&format!(
            " These parts of the request do not count when comparing a retry with the first \
             request: {}.",
            paths.join(", ")
        ));
    }
    doc.push_str(&format!(
        "\n\nStatuses: {}; each is explained in the generated documentation \
         (`idem_runtime::docs`).",
        statuses.join(", ")
    ));
    doc
}
