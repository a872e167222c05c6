//! `problems = [problem(409, "urn:…", "Title"), problem(503, "urn:…", "Title", retry_after)]`:
//! the problems the application itself answers, for the generated documents.

use idem_docs::ProblemDoc;
use idem_docs::contract::IDEM_PROBLEM_PREFIX;
use syn::{Expr, ExprArray, ExprCall, ExprLit, Lit, LitStr};

use crate::args::Errors;

const PROBLEM_FORMS: &str = "`problems` takes a list of the operation's own problems, such as \
     `problems = [problem(409, \"urn:example:version-conflict\", \"version conflict\")]`; \
     add `retry_after` after the title of one that carries `Retry-After`";

/// Reads `problems = […]`: every mistake is reported, at its token.
pub(crate) fn parse(value: &Expr) -> syn::Result<Vec<ProblemDoc>> {
    let Expr::Array(ExprArray { elems, .. }) = value else {
        return Err(syn::Error::new_spanned(value, PROBLEM_FORMS));
    };
    let mut errors = Errors::default();
    let mut problems: Vec<ProblemDoc> = Vec::new();
    for elem in elems {
        match problem(elem) {
            Ok((problem, type_lit)) => {
                if problems.iter().any(|p| p.type_uri == problem.type_uri) {
                    errors.push(syn::Error::new(
                        type_lit.span(),
                        format!(
                            "duplicate problem type `{}`: a type names one problem; give each \
                             problem its own",
                            problem.type_uri
                        ),
                    ));
                } else {
                    problems.push(problem);
                }
            }
            Err(error) => errors.push(error),
        }
    }
    errors.finish().map(|()| problems)
}

/// `problem(409, "urn:…", "Title")` or `problem(503, "urn:…", "Title", retry_after)`, and
/// the literal of its type.
fn problem(elem: &Expr) -> syn::Result<(ProblemDoc, LitStr)> {
    let Expr::Call(ExprCall { func, args, .. }) = elem else {
        return Err(syn::Error::new_spanned(elem, PROBLEM_FORMS));
    };
    let named_problem = matches!(&**func, Expr::Path(path)
        if path.qself.is_none() && path.path.is_ident("problem"));
    if !named_problem || !(3..=4).contains(&args.len()) {
        return Err(syn::Error::new_spanned(elem, PROBLEM_FORMS));
    }
    let args: Vec<&Expr> = args.iter().collect();
    let mut errors = Errors::default();
    let status = status(args[0]).map_err(|e| errors.push(e)).ok();
    let type_lit = problem_type(args[1]).map_err(|e| errors.push(e)).ok();
    let title = title(args[2]).map_err(|e| errors.push(e)).ok();
    let retry_after = args.get(3).is_some_and(|flag| {
        let named = matches!(flag, Expr::Path(path)
            if path.qself.is_none() && path.path.is_ident("retry_after"));
        if !named {
            errors.push(syn::Error::new_spanned(
                flag,
                "after the title, a problem takes only `retry_after`: it carries `Retry-After`",
            ));
        }
        named
    });
    errors.finish()?;
    match (status, type_lit, title) {
        (Some(status), Some(type_lit), Some(title)) => {
            let mut problem = ProblemDoc::new(status, &type_lit.value(), &title);
            if retry_after {
                problem = problem.retry_after();
            }
            Ok((problem, type_lit))
        }
        _ => Err(syn::Error::new_spanned(elem, PROBLEM_FORMS)),
    }
}

/// The status: a whole number from 400 to 599, the statuses of a problem.
fn status(value: &Expr) -> syn::Result<u16> {
    let Expr::Lit(ExprLit {
        lit: Lit::Int(int), ..
    }) = value
    else {
        return Err(syn::Error::new_spanned(
            value,
            "a problem's status is a number from 400 to 599, such as `409`",
        ));
    };
    match int.base10_parse::<u16>() {
        Ok(status) if (400..=599).contains(&status) => Ok(status),
        _ => Err(syn::Error::new(
            int.span(),
            format!(
                "invalid problem status `{int}`: a problem is answered with a status from 400 \
                 to 599"
            ),
        )),
    }
}

/// The problem's type: a URI without spaces, not one of idem's own types.
fn problem_type(value: &Expr) -> syn::Result<LitStr> {
    let lit = string(value, "type", "\"urn:example:version-conflict\"")?;
    let text = lit.value();
    if text.is_empty() {
        return Err(syn::Error::new(
            lit.span(),
            "a problem's type is empty: write the URI clients tell it by, such as \
             `\"urn:example:version-conflict\"`",
        ));
    }
    if text.chars().any(|c| c.is_whitespace() || c.is_control()) {
        return Err(syn::Error::new(
            lit.span(),
            format!("invalid problem type `{text}`: a URI has no spaces or control characters"),
        ));
    }
    if text.starts_with(IDEM_PROBLEM_PREFIX) {
        return Err(syn::Error::new(
            lit.span(),
            format!(
                "`{text}` is one of idem's own problem types, which the documents already list; \
                 declare the operation's own problems, with types of the application's"
            ),
        ));
    }
    Ok(lit)
}

/// The problem's title: a short, fixed summary, not empty.
fn title(value: &Expr) -> syn::Result<String> {
    let lit = string(value, "title", "\"version conflict\"")?;
    let text = lit.value();
    if text.trim().is_empty() {
        return Err(syn::Error::new(
            lit.span(),
            "a problem's title is empty: write a short summary of its type, such as \
             `\"version conflict\"`",
        ));
    }
    Ok(text)
}

/// A string literal, the problem's `what`.
fn string(value: &Expr, what: &str, example: &str) -> syn::Result<LitStr> {
    match value {
        Expr::Lit(ExprLit {
            lit: Lit::Str(lit), ..
        }) => Ok(lit.clone()),
        other => Err(syn::Error::new_spanned(
            other,
            format!("a problem's {what} is a string literal, such as `{example}`"),
        )),
    }
}
