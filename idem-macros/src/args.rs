//! The attribute's arguments: `#[idempotent(ttl = "24h", scope = "tenant", …)]`.

use proc_macro2::{Span, TokenStream};
use syn::parse::{Parse, ParseStream, Parser as _};
use syn::punctuated::Punctuated;
use syn::{Expr, ExprArray, ExprLit, Ident, Lit, LitStr, Token};

use crate::duration::parse_seconds;

const ARGUMENTS: &str = "`ttl`, `scope`, `operation`, `version`, `on_expired`, `key`, \
                         `store_client_errors`, `exclude`";

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Scope {
    Global,
    Tenant,
    User,
}

#[derive(Debug)]
pub(crate) struct Args {
    pub ttl_secs: u64,
    pub scope: Scope,
    pub operation: Option<String>,
    pub version: u32,
    pub reexecute: bool,
    pub key_optional: bool,
    pub store_client_errors: bool,
    pub exclude: Vec<String>,
}

struct Arg {
    name: Ident,
    value: Expr,
}

impl Parse for Arg {
    fn parse(input: ParseStream<'_>) -> syn::Result<Self> {
        let name: Ident = input.parse()?;
        input
            .parse::<Token![=]>()
            .map_err(|_| syn::Error::new(name.span(), format!("expected `{name} = …`")))?;
        Ok(Self {
            name,
            value: input.parse()?,
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

fn choice<T: Copy>(value: &Expr, what: &str, options: &[(&str, T)]) -> syn::Result<T> {
    let lit = string(value, what)?;
    let text = lit.value();
    options
        .iter()
        .find(|(name, _)| *name == text)
        .map(|(_, v)| *v)
        .ok_or_else(|| {
            let names: Vec<String> = options.iter().map(|(n, _)| format!("`{n}`")).collect();
            syn::Error::new(
                lit.span(),
                format!(
                    "unknown {what} `{text}`; expected one of: {}",
                    names.join(", ")
                ),
            )
        })
}

impl Args {
    pub(crate) fn parse(tokens: TokenStream, errors: &mut Errors) -> Option<Self> {
        let parsed = match Punctuated::<Arg, Token![,]>::parse_terminated.parse2(tokens) {
            Ok(parsed) => parsed,
            Err(error) => {
                errors.push(error);
                return None;
            }
        };
        let mut ttl_secs = None;
        let mut scope = None;
        let mut operation = None;
        let mut version = None;
        let mut reexecute = None;
        let mut key_optional = None;
        let mut store_client_errors = None;
        let mut exclude = None;
        let mut seen: Vec<String> = Vec::new();

        for arg in parsed {
            let name = arg.name.to_string();
            if seen.contains(&name) {
                errors.push(syn::Error::new(
                    arg.name.span(),
                    format!("duplicate argument `{name}`"),
                ));
                continue;
            }
            seen.push(name.clone());
            let value = &arg.value;
            let result = match name.as_str() {
                "ttl" => string(value, "ttl").and_then(|lit| {
                    parse_seconds(&lit.value())
                        .map(|s| ttl_secs = Some(s))
                        .ok_or_else(|| {
                            syn::Error::new(
                                lit.span(),
                                format!(
                                    "invalid `ttl` `{}`; expected a positive duration such as \
                                     `\"30s\"`, `\"15m\"`, `\"24h\"`, `\"7d\"` or `\"1h30m\"`",
                                    lit.value()
                                ),
                            )
                        })
                }),
                "scope" => choice(
                    value,
                    "scope",
                    &[
                        ("tenant", Scope::Tenant),
                        ("user", Scope::User),
                        ("global", Scope::Global),
                    ],
                )
                .map(|s| scope = Some(s)),
                "operation" => string(value, "operation").and_then(|lit| {
                    let text = lit.value();
                    if text.trim().is_empty() || text.contains(':') {
                        Err(syn::Error::new(
                            lit.span(),
                            "`operation` must be a non-empty name without `:`, such as \
                             `\"POST /orders\"`; the version is added as `:v1`",
                        ))
                    } else {
                        operation = Some(text);
                        Ok(())
                    }
                }),
                "version" => match value {
                    Expr::Lit(ExprLit {
                        lit: Lit::Int(int), ..
                    }) => match int.base10_parse::<u32>() {
                        Ok(v) if v > 0 => {
                            version = Some(v);
                            Ok(())
                        }
                        _ => Err(syn::Error::new(
                            int.span(),
                            "`version` must be a whole number from 1",
                        )),
                    },
                    other => Err(syn::Error::new_spanned(
                        other,
                        "`version` takes a whole number, such as `version = 2`",
                    )),
                },
                "on_expired" => choice(
                    value,
                    "on_expired policy",
                    &[("gone", false), ("reexecute", true)],
                )
                .map(|v| reexecute = Some(v)),
                "key" => choice(
                    value,
                    "key requirement",
                    &[("required", false), ("optional", true)],
                )
                .map(|v| key_optional = Some(v)),
                "store_client_errors" => match value {
                    Expr::Lit(ExprLit {
                        lit: Lit::Bool(b), ..
                    }) => {
                        store_client_errors = Some(b.value);
                        Ok(())
                    }
                    other => Err(syn::Error::new_spanned(
                        other,
                        "`store_client_errors` takes `true` or `false`",
                    )),
                },
                "exclude" => parse_exclude(value).map(|v| exclude = Some(v)),
                _ => Err(syn::Error::new(
                    arg.name.span(),
                    format!("unknown argument `{name}`; expected one of: {ARGUMENTS}"),
                )),
            };
            if let Err(error) = result {
                errors.push(error);
            }
        }

        if scope.is_none() && !seen.iter().any(|s| s == "scope") {
            errors.push(syn::Error::new(
                Span::call_site(),
                "missing `scope`; add `scope = \"tenant\"`, `scope = \"user\"` or \
                 `scope = \"global\"` (keys are unique per scope, operation and key)",
            ));
        }
        Some(Self {
            ttl_secs: ttl_secs.unwrap_or(24 * 3600),
            scope: scope.unwrap_or(Scope::Global),
            operation,
            version: version.unwrap_or(1),
            reexecute: reexecute.unwrap_or(false),
            key_optional: key_optional.unwrap_or(false),
            store_client_errors: store_client_errors.unwrap_or(false),
            exclude: exclude.unwrap_or_default(),
        })
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
        let root = path.split('.').next().unwrap_or_default();
        let well_formed = path.split('.').all(|s| !s.is_empty());
        if !well_formed || !matches!(root, "body" | "path" | "query") {
            return Err(syn::Error::new(
                lit.span(),
                format!(
                    "invalid fingerprint path `{path}`; paths start with `body`, `path` or \
                     `query`, such as `\"body.note\"`"
                ),
            ));
        }
        paths.push(path);
    }
    Ok(paths)
}
