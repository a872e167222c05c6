//! The attribute's arguments: `#[idempotent(ttl = "24h", scope = "tenant", …)]`.
//!
//! Every word and duration is read with `idem_spec`, the vocabulary the runtime, the operator
//! tool and the docs generator share, so they all accept exactly the same spellings.

use std::str::FromStr;
use std::time::Duration;

use idem_docs::ProblemDoc;
use idem_spec::{
    KeyPart, KeyRequirement, KeySource, MAX_TTL, Mode, OperationSpec, UnknownWord,
    check_header_name, check_pointer, describe_duration, operation_id, parse_duration,
};
use proc_macro2::{Span, TokenStream};
use syn::parse::discouraged::Speculative as _;
use syn::parse::{Parse, ParseStream, Parser as _};
use syn::punctuated::Punctuated;
use syn::{Expr, ExprArray, ExprLit, Ident, Lit, LitStr, Token, Type};

use crate::problems;

const ARGUMENTS: &str = "`ttl`, `scope`, `operation`, `version`, `on_expired`, `key`, `mode`, \
                         `lease`, `on_in_flight`, `store_client_errors`, `mismatch_detail`, \
                         `exclude`, `state`, `path`, `problems`";

/// The parsed arguments, with the defaults filled in.
pub(crate) struct Args {
    /// The operation as the attribute describes it, built once: the expansion writes it out
    /// as the handler's `static` spec and describes it in the handler's rustdoc. Its id
    /// (`<operation>:v<version>`) and excluded paths are leaked into `'static` strings, a few
    /// bytes per annotated handler in the compiler's process.
    pub spec: OperationSpec,
    /// The application state, when named (`state = AppState`): enables the checks that need
    /// it.
    pub state: Option<Type>,
    /// `path = "POST /orders"`: the route, for the generated documentation.
    pub route: Option<(String, String)>,
    /// `problems = [problem(409, "urn:…", "Title")]`: the operation's own problems, for the
    /// generated documentation.
    pub problems: Vec<ProblemDoc>,
}

struct Arg {
    name: Ident,
    value: Expr,
    /// `state = AppState<DB>` is a type, which does not parse as an expression.
    ty: Option<Type>,
}

impl Parse for Arg {
    fn parse(input: ParseStream<'_>) -> syn::Result<Self> {
        let name: Ident = input.parse()?;
        input
            .parse::<Token![=]>()
            .map_err(|_| syn::Error::new(name.span(), format!("expected `{name} = …`")))?;
        if name == "state" {
            let fork = input.fork();
            if let Ok(ty @ Type::Path(_)) = fork.parse::<Type>()
                && (fork.is_empty() || fork.peek(Token![,]))
            {
                input.advance_to(&fork);
                let value = Expr::Verbatim(quote::ToTokens::to_token_stream(&ty));
                return Ok(Self {
                    name,
                    value,
                    ty: Some(ty),
                });
            }
        }
        Ok(Self {
            name,
            value: input.parse()?,
            ty: None,
        })
    }
}

/// Collects every error instead of stopping at the first.
#[derive(Default)]
pub(crate) struct Errors(Option<syn::Error>);

impl Errors {
    pub(crate) fn push(&mut self, error: syn::Error) {
        match &mut self.0 {
            Some(all) => all.combine(error),
            None => self.0 = Some(error),
        }
    }

    pub(crate) fn finish(self) -> syn::Result<()> {
        self.0.map_or(Ok(()), Err)
    }
}

fn string(value: &Expr, what: &str) -> syn::Result<LitStr> {
    match value {
        Expr::Lit(ExprLit {
            lit: Lit::Str(s), ..
        }) => Ok(s.clone()),
        other => Err(syn::Error::new_spanned(
            other,
            format!("`{what}` takes a string literal, such as `{what} = \"…\"`"),
        )),
    }
}

/// A word of the shared vocabulary; the error lists the accepted words.
fn word<T: FromStr<Err = UnknownWord>>(value: &Expr, what: &str) -> syn::Result<T> {
    let lit = string(value, what)?;
    lit.value()
        .parse()
        .map_err(|e: UnknownWord| syn::Error::new(lit.span(), e.to_string()))
}

fn ttl(value: &Expr) -> syn::Result<Duration> {
    let lit = string(value, "ttl")?;
    let ttl = parse_duration(&lit.value()).map_err(|reason| {
        syn::Error::new(
            lit.span(),
            format!(
                "invalid `ttl` `{}`: {reason}; write a duration such as `\"30s\"`, `\"15m\"`, \
                 `\"24h\"`, `\"7d\"` or `\"1h30m\"`",
                lit.value()
            ),
        )
    })?;
    if ttl > MAX_TTL {
        return Err(syn::Error::new(
            lit.span(),
            format!(
                "`ttl` `{}` is longer than the maximum of {}: keys kept that long grow the key \
                 table without bound; check the unit",
                lit.value(),
                describe_duration(MAX_TTL)
            ),
        ));
    }
    Ok(ttl)
}

fn lease(value: &Expr) -> syn::Result<(Duration, Span)> {
    let lit = string(value, "lease")?;
    let lease = parse_duration(&lit.value()).map_err(|reason| {
        syn::Error::new(
            lit.span(),
            format!(
                "invalid `lease` `{}`: {reason}; write a duration such as `\"30s\"` or `\"2m\"`",
                lit.value()
            ),
        )
    })?;
    if lease < Duration::from_secs(1) {
        return Err(syn::Error::new(
            lit.span(),
            "`lease` must be at least `\"1s\"`: the heartbeat renews it every third of it",
        ));
    }
    Ok((lease, lit.span()))
}

/// `path = "POST /orders"`: an upper-case method, one space, a path from `/` without spaces.
/// `true` or `false`, for the argument `name`.
fn boolean(value: &Expr, name: &str) -> syn::Result<bool> {
    match value {
        Expr::Lit(ExprLit {
            lit: Lit::Bool(b), ..
        }) => Ok(b.value),
        other => Err(syn::Error::new_spanned(
            other,
            format!("`{name}` takes `true` or `false`"),
        )),
    }
}

fn route(value: &Expr) -> syn::Result<(String, String)> {
    let lit = string(value, "path")?;
    let text = lit.value();
    let parsed = text.split_once(' ').filter(|(method, path)| {
        !method.is_empty()
            && method.bytes().all(|b| b.is_ascii_uppercase())
            && path.starts_with('/')
            && !path.chars().any(|c| c.is_whitespace() || c.is_control())
    });
    match parsed {
        Some((method, path)) => Ok((method.to_owned(), path.to_owned())),
        None => Err(syn::Error::new(
            lit.span(),
            format!(
                "invalid `path` `{text}`: write the method in capitals, one space and the \
                 route's path from `/`, such as `path = \"POST /orders\"`"
            ),
        )),
    }
}

impl Args {
    /// Parses the arguments; `None` when they cannot be read at all. Every mistake is pushed
    /// to `errors`.
    pub(crate) fn parse(tokens: TokenStream, fn_name: &Ident, errors: &mut Errors) -> Option<Self> {
        let parsed = match Punctuated::<Arg, Token![,]>::parse_terminated.parse2(tokens) {
            Ok(parsed) => parsed,
            Err(error) => {
                errors.push(error);
                return None;
            }
        };
        let mut reading = Reading {
            args: Self {
                spec: OperationSpec::new(""),
                state: None,
                route: None,
                problems: Vec::new(),
            },
            ttl_given: false,
            lease_span: None,
            operation: None,
            version: None,
            given: Vec::new(),
        };
        for arg in parsed {
            let name = arg.name.to_string();
            if reading.given(&name) {
                errors.push(syn::Error::new(
                    arg.name.span(),
                    format!("duplicate argument `{name}`"),
                ));
                continue;
            }
            reading.given.push((name.clone(), arg.name.span()));
            if let Err(error) = reading.apply(&name, arg) {
                errors.push(error);
            }
        }
        if reading.args.spec.mode == Mode::Staged {
            reading.check_staged(errors);
        } else {
            reading.check_atomic(errors);
        }
        if !reading.given("scope") {
            errors.push(syn::Error::new(
                Span::call_site(),
                "missing `scope`; add `scope = \"tenant\"`, `scope = \"user\"` or \
                 `scope = \"global\"` (keys are unique per scope, operation and key)",
            ));
        }
        reading.identify(fn_name, errors);
        Some(reading.args)
    }
}

/// The arguments as they are read, and what the checks made after the last one need.
struct Reading {
    /// The arguments read so far, on top of the defaults.
    args: Args,
    /// `ttl` was given (a `lease` longer than the default one says so).
    ttl_given: bool,
    /// Where `lease` was given.
    lease_span: Option<Span>,
    /// `operation = "…"`.
    operation: Option<LitStr>,
    /// `version = N`, and where.
    version: Option<(u32, Span)>,
    /// Each argument's name, where it was given, in order; once each.
    given: Vec<(String, Span)>,
}

impl Reading {
    /// Whether the argument `name` was given.
    fn given(&self, name: &str) -> bool {
        self.given.iter().any(|(n, _)| n == name)
    }

    /// Where the argument `name` was given, or the attribute's place.
    fn span_of(&self, name: &str) -> Span {
        self.given
            .iter()
            .find(|(n, _)| n == name)
            .map_or_else(Span::call_site, |(_, span)| *span)
    }

    /// Reads one argument, `name = value`, into the arguments.
    fn apply(&mut self, name: &str, arg: Arg) -> syn::Result<()> {
        let spec = &mut self.args.spec;
        let value = &arg.value;
        match name {
            "ttl" => ttl(value).map(|t| {
                *spec = spec.ttl(t);
                self.ttl_given = true;
            }),
            "scope" => word(value, "scope").map(|s| *spec = spec.scope(s)),
            "on_expired" => word(value, "on_expired").map(|p| *spec = spec.on_expired(p)),
            "key" => key(value).map(|key| {
                *spec = match key {
                    Key::Requirement(k) => spec.key(k),
                    Key::From(source) => spec.key_from(source),
                };
            }),
            "mode" => word(value, "mode").map(|m| *spec = spec.mode(m)),
            "lease" => lease(value).map(|(l, span)| {
                *spec = spec.lease(l);
                self.lease_span = Some(span);
            }),
            "path" => route(value).map(|r| self.args.route = Some(r)),
            "problems" => problems::parse(value).map(|p| self.args.problems = p),
            "on_in_flight" => word(value, "on_in_flight").map(|p| *spec = spec.on_in_flight(p)),
            "operation" => string(value, "operation").map(|lit| self.operation = Some(lit)),
            "version" => parse_version(value).map(|v| self.version = Some(v)),
            "store_client_errors" => {
                boolean(value, "store_client_errors").map(|b| *spec = spec.store_client_errors(b))
            }
            "mismatch_detail" => {
                boolean(value, "mismatch_detail").map(|b| *spec = spec.mismatch_detail(b))
            }
            "exclude" => parse_exclude(value).map(|paths| {
                let paths: Vec<&'static str> = paths.into_iter().map(leak).collect();
                *spec = spec.fingerprint_exclude(paths.leak());
            }),
            "state" => match arg.ty {
                Some(ty) => {
                    self.args.state = Some(ty);
                    Ok(())
                }
                None => Err(syn::Error::new_spanned(
                    value,
                    "`state` takes the application state's type, such as `state = AppState`",
                )),
            },
            _ => Err(syn::Error::new(
                arg.name.span(),
                format!("unknown argument `{name}`; expected one of: {ARGUMENTS}"),
            )),
        }
    }

    /// `mode = "staged"`: no optional key, no stored client errors, a lease within the ttl.
    fn check_staged(&self, errors: &mut Errors) {
        let spec = &self.args.spec;
        let refused = [
            (
                "key",
                spec.key == KeyRequirement::Optional,
                "`key = \"optional\"` does not go with `mode = \"staged\"`: a staged \
                 operation keeps its progress in its key's row",
            ),
            (
                "store_client_errors",
                spec.store_client_errors,
                "`store_client_errors` does not go with `mode = \"staged\"`: a staged \
                 operation stores a failure by returning `StepError::permanent(…)`",
            ),
        ];
        for (name, wrong, message) in refused {
            if wrong {
                errors.push(syn::Error::new(self.span_of(name), message));
            }
        }
        if let Some(span) = self.lease_span
            && spec.lease > spec.ttl
        {
            errors.push(syn::Error::new(
                span,
                format!(
                    "`lease` ({}) is longer than `ttl` ({}{}): the key would expire while an \
                     attempt still holds it; shorten the lease or lengthen the ttl",
                    describe_duration(spec.lease),
                    describe_duration(spec.ttl),
                    if self.ttl_given { "" } else { ", the default" },
                ),
            ));
        }
    }

    /// An atomic operation: staged mode's arguments do not apply.
    fn check_atomic(&self, errors: &mut Errors) {
        for name in ["lease", "on_in_flight"] {
            if self.given(name) {
                errors.push(syn::Error::new(
                    self.span_of(name),
                    format!("`{name}` applies to `mode = \"staged\"` only"),
                ));
            }
        }
    }

    /// The operation's id, `<operation>:v<version>`: the handler's name unless `operation`
    /// names it, version 1 unless `version` says otherwise.
    fn identify(&mut self, fn_name: &Ident, errors: &mut Errors) {
        let name = self
            .operation
            .as_ref()
            .map_or_else(|| fn_name.to_string(), LitStr::value);
        let span = self.operation.as_ref().map_or(fn_name.span(), LitStr::span);
        let version_number = self.version.map_or(1, |(v, _)| v);
        match operation_id(&name, version_number) {
            Ok(id) => self.args.spec.id = leak(id),
            Err(reason) => {
                let span = match (reason, self.version) {
                    (idem_spec::OperationIdError::VersionZero, Some((_, span))) => span,
                    _ => span,
                };
                errors.push(syn::Error::new(
                    span,
                    format!(
                        "invalid `operation` `{name}`: {reason} (name operations such as \
                         `operation = \"POST /orders\"`)"
                    ),
                ));
            }
        }
    }
}

/// What `key = …` says: whether the `Idempotency-Key` header is required, or where else
/// the key comes from.
enum Key {
    Requirement(KeyRequirement),
    From(KeySource),
}

const KEY_FORMS: &str = "`key` takes `\"required\"`, `\"optional\"`, `header(\"webhook-id\")`, \
                         `body(\"/id\")` or a list of headers and body fields, such as \
                         `key = [body(\"/pspReference\"), body(\"/eventCode\")]`";

/// `key = "optional"`, `key = header("webhook-id")`, `key = body("/id")`,
/// `key = [body("/a"), header("x-b")]`.
fn key(value: &Expr) -> syn::Result<Key> {
    match value {
        Expr::Lit(_) => word(value, "key").map(Key::Requirement),
        Expr::Call(_) => Ok(Key::From(KeySource::Parts(Vec::leak(vec![key_part(
            value,
        )?])))),
        Expr::Array(ExprArray { elems, .. }) => {
            if elems.is_empty() {
                return Err(syn::Error::new_spanned(value, KEY_FORMS));
            }
            let parts = elems
                .iter()
                .map(key_part)
                .collect::<syn::Result<Vec<_>>>()?;
            Ok(Key::From(KeySource::Parts(parts.leak())))
        }
        other => Err(syn::Error::new_spanned(other, KEY_FORMS)),
    }
}

/// `header("webhook-id")` or `body("/id")`.
fn key_part(value: &Expr) -> syn::Result<KeyPart> {
    let Expr::Call(call) = value else {
        return Err(syn::Error::new_spanned(value, KEY_FORMS));
    };
    let function = match &*call.func {
        Expr::Path(path) if path.qself.is_none() => path.path.get_ident().map(Ident::to_string),
        _ => None,
    };
    let lit = match (call.args.len(), call.args.first()) {
        (1, Some(arg)) => string(arg, function.as_deref().unwrap_or("key"))?,
        _ => return Err(syn::Error::new_spanned(value, KEY_FORMS)),
    };
    let text = lit.value();
    match function.as_deref() {
        Some("header") => check_header_name(&text)
            .map(|()| KeyPart::Header(leak(text)))
            .map_err(|e| syn::Error::new(lit.span(), e.to_string())),
        Some("body") => check_pointer(&text)
            .map(|()| KeyPart::Body(leak(text)))
            .map_err(|e| syn::Error::new(lit.span(), e.to_string())),
        _ => Err(syn::Error::new_spanned(&call.func, KEY_FORMS)),
    }
}

fn parse_version(value: &Expr) -> syn::Result<(u32, Span)> {
    match value {
        Expr::Lit(ExprLit {
            lit: Lit::Int(int), ..
        }) => match int.base10_parse::<u32>() {
            Ok(v) if v > 0 => Ok((v, int.span())),
            _ => Err(syn::Error::new(
                int.span(),
                "`version` must be a whole number from 1",
            )),
        },
        other => Err(syn::Error::new_spanned(
            other,
            "`version` takes a whole number, such as `version = 2`",
        )),
    }
}

fn parse_exclude(value: &Expr) -> syn::Result<Vec<String>> {
    let Expr::Array(ExprArray { elems, .. }) = value else {
        return Err(syn::Error::new_spanned(
            value,
            "`exclude` takes a list of paths, such as `exclude = [\"body.note\"]`",
        ));
    };
    let mut paths = Vec::new();
    for elem in elems {
        let lit = string(elem, "exclude")?;
        let path = lit.value();
        // A part's name, or the name of a later part of the same kind: `body#2`.
        let root = path.split('.').next().unwrap_or_default();
        let (part, occurrence) = root.split_once('#').unwrap_or((root, "1"));
        let well_formed = path.split('.').all(|s| !s.is_empty())
            && occurrence.parse::<u8>().is_ok_and(|n| n >= 1);
        if !well_formed || !matches!(part, "body" | "path" | "query" | "headers") {
            return Err(syn::Error::new(
                lit.span(),
                format!(
                    "invalid fingerprint path `{path}`; paths start with `body`, `path`, \
                     `query` or `headers`, such as `\"body.note\"`"
                ),
            ));
        }
        paths.push(path);
    }
    Ok(paths)
}

/// `text` for the life of the compiler's process: the spec's strings are `'static`.
fn leak(text: String) -> &'static str {
    Box::leak(text.into_boxed_str())
}
