//! The Markdown document: an overview table, then one section per operation.

use std::fmt::Write as _;

use idem_spec::{KeyRequirement, Mode, describe_duration};

use crate::OperationDoc;
use crate::contract::{self, EXAMPLE_KEY, KEY_HEADER, REPLAYED_HEADER};

/// The client's contract of every operation, as Markdown.
///
/// ```
/// use idem_docs::{OperationDoc, markdown};
/// use idem_spec::OperationSpec;
///
/// let doc = OperationDoc::from_spec(&OperationSpec::new("create_order:v1")).path("POST", "/orders");
/// let text = markdown(&[doc]);
/// assert!(text.starts_with("# Idempotent operations"));
/// assert!(text.contains("## POST /orders"));
/// assert!(text.contains("| 410 `urn:idem:problem:key-expired` |"));
/// ```
#[must_use]
pub fn markdown(docs: &[OperationDoc]) -> String {
    let mut out = String::new();
    // Writing to a `String` cannot fail.
    let _ = write_all(&mut out, docs);
    out
}

fn write_all(out: &mut String, docs: &[OperationDoc]) -> std::fmt::Result {
    writeln!(out, "# Idempotent operations\n")?;
    writeln!(
        out,
        "These operations are safe to retry: send an `{KEY_HEADER}` header, and a retry with \
         the same key and the same request gets the first request's response instead of \
         running the operation again.\n"
    )?;
    if docs.is_empty() {
        writeln!(out, "No operation is documented.")?;
        return Ok(());
    }
    writeln!(
        out,
        "| Operation | Id | Mode | Key | Keys unique per | Kept for | After that |"
    )?;
    writeln!(out, "|---|---|---|---|---|---|---|")?;
    for doc in docs {
        writeln!(
            out,
            "| {} | `{}` | {} | {} | {} | {} | {} |",
            cell(&doc.title()),
            cell(&doc.id),
            doc.mode,
            doc.key,
            contract::namespace(doc.scope),
            describe_duration(doc.ttl),
            match doc.on_expired {
                idem_spec::ExpiryPolicy::Gone => "410 Gone",
                _ => "runs anew",
            }
        )?;
    }
    for doc in docs {
        writeln!(out)?;
        section(out, doc)?;
    }
    Ok(())
}

/// Escapes what would break a table cell.
fn cell(text: &str) -> String {
    text.replace('|', "\\|").replace('\n', " ")
}

fn section(out: &mut String, doc: &OperationDoc) -> std::fmt::Result {
    writeln!(out, "## {}\n", doc.title())?;
    let mut about = vec![format!("Operation `{}`", doc.id)];
    if !doc.handler.is_empty() {
        about.push(format!("handler `{}`", doc.handler));
    }
    if let Some(source) = &doc.source {
        about.push(format!("`{source}`"));
    }
    writeln!(out, "{}.\n", about.join(", "))?;
    writeln!(out, "{}\n", contract::summary(doc))?;

    writeln!(out, "### The `{KEY_HEADER}` header\n")?;
    writeln!(out, "{}\n", contract::key_requirement(doc))?;
    writeln!(out, "{}\n", contract::key_syntax())?;

    writeln!(out, "### Responses\n")?;
    writeln!(out, "| Status | When | What the client does |")?;
    writeln!(out, "|---|---|---|")?;
    for case in contract::cases(doc) {
        let mut status = case.status.clone();
        if let Some(problem) = case.problem {
            let _ = write!(status, " `{problem}`");
        }
        if case.retry_after {
            status.push_str(" + `Retry-After`");
        }
        if case.replayed {
            let _ = write!(status, " + `{REPLAYED_HEADER}: true`");
        }
        writeln!(
            out,
            "| {} | {} | {} |",
            cell(&status),
            cell(&case.when),
            cell(&case.then)
        )?;
    }
    writeln!(out)?;
    writeln!(
        out,
        "Errors of idem are `{}` bodies (RFC 9457) with the `type` above. {}\n",
        contract::PROBLEM_MEDIA_TYPE,
        contract::own_failure(doc)
    )?;

    writeln!(out, "### Headers of the response\n")?;
    writeln!(out, "- {}", contract::retry_after_header())?;
    writeln!(out, "- {}\n", contract::replayed_header())?;

    writeln!(out, "### When the window lapses\n")?;
    writeln!(out, "{}\n", contract::window(doc))?;
    if doc.mode == Mode::Staged {
        writeln!(
            out,
            "A running attempt holds its key with a lease of {}, renewed while it runs; an \
             attempt that stops renewing it is taken over by the next retry or by the \
             server's reconciler, which resumes it after its last recorded step.\n",
            describe_duration(doc.lease)
        )?;
    }

    example(out, doc)
}

/// One example request with its key: the first and its retry are the same.
fn request(out: &mut String, method: &str, path: &str) -> std::fmt::Result {
    writeln!(out, "```http")?;
    writeln!(out, "{method} {path} HTTP/1.1")?;
    writeln!(out, "{KEY_HEADER}: \"{EXAMPLE_KEY}\"")?;
    writeln!(out, "Content-Type: application/json\n")?;
    writeln!(out, "{{ … }}")?;
    writeln!(out, "```\n")?;
    Ok(())
}

fn example(out: &mut String, doc: &OperationDoc) -> std::fmt::Result {
    let method = doc.method.as_deref().unwrap_or("POST");
    let path = doc.path.as_deref().unwrap_or("/…");
    writeln!(out, "### Example\n")?;
    request(out, method, path)?;
    writeln!(
        out,
        "The connection drops before the response arrives. The client sends the same request \
         with the same key:\n"
    )?;
    request(out, method, path)?;
    writeln!(
        out,
        "If the first request completed, the answer is its stored response with \
         `{REPLAYED_HEADER}: true`; if it is still running, `409` with `Retry-After`; if it \
         never arrived, the operation runs now, once."
    )?;
    if doc.key == KeyRequirement::Optional {
        writeln!(
            out,
            "\nWithout the header the request runs like any other: a retry of it runs again."
        )?;
    }
    Ok(())
}
