//! The Markdown document: an overview table, then one section per operation.

use std::fmt::Write as _;

use idem_spec::{Mode, describe_duration};
use serde_json::Value;

use crate::contract::{self, EXAMPLE_KEY, IN_FLIGHT, KEY_HEADER, REPLAYED_HEADER, WEBHOOK_HEADERS};
use crate::{KeyPartDoc, OperationDoc};

/// The client's contract of every operation, as Markdown. Each operation's section names
/// its handler, and where the handler is written only when
/// [`OperationDoc::publish_source`] is set. A verified webhook's
/// ([`OperationDoc::verified_webhook`]) has a section on its signed deliveries, their
/// headers in its example requests, and the `401` of a delivery that does not verify.
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
        "These operations are safe to retry: {}, and a retry with the same key and the same \
         request gets the first request's response instead of running the operation again.\n",
        contract::send_keys(docs)
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
            cell(&key_cell(doc)),
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

/// The overview's key column: `required`, `optional`, or where a key taken from the request
/// comes from.
fn key_cell(doc: &OperationDoc) -> String {
    if doc.key_from.is_empty() {
        doc.key.to_string()
    } else {
        format!("required, from {}", contract::key_source(doc))
    }
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
    if let Some(source) = doc.published_source() {
        about.push(format!("`{source}`"));
    }
    writeln!(out, "{}.\n", about.join(", "))?;
    writeln!(out, "{}\n", contract::summary(doc))?;

    if doc.key_from.is_empty() {
        writeln!(out, "### The `{KEY_HEADER}` header\n")?;
    } else {
        writeln!(out, "### The key\n")?;
    }
    writeln!(out, "{}\n", contract::key_requirement(doc))?;
    writeln!(out, "{}\n", contract::key_format(doc))?;

    if doc.verified_webhook {
        writeln!(out, "### Signed deliveries\n")?;
        writeln!(out, "{}\n", contract::webhook_verification())?;
        for (name, description) in WEBHOOK_HEADERS {
            writeln!(out, "- `{name}`: {description}")?;
        }
        writeln!(out)?;
    }

    writeln!(out, "### Responses\n")?;
    writeln!(out, "| Status | When | What the client does |")?;
    writeln!(out, "|---|---|---|")?;
    for case in contract::cases(doc) {
        let mut status = case.status.clone();
        if let Some(problem) = case.problem_type() {
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

/// One example request with its key: the first and its retry are the same. The key is in
/// `Idempotency-Key`, or in the headers and body fields it is taken from.
fn request(out: &mut String, doc: &OperationDoc, method: &str, path: &str) -> std::fmt::Result {
    writeln!(out, "```http")?;
    writeln!(out, "{method} {path} HTTP/1.1")?;
    if doc.key_from.is_empty() {
        writeln!(out, "{KEY_HEADER}: \"{EXAMPLE_KEY}\"")?;
    }
    let mut headers: Vec<(&str, String)> = Vec::new();
    for (part, value) in contract::example_values(doc) {
        if let KeyPartDoc::Header(name) = part {
            headers.push((name, value));
        }
    }
    if doc.verified_webhook {
        // The signature's headers, their values left out as the body's fields are.
        for (name, _) in WEBHOOK_HEADERS {
            if !headers.iter().any(|(n, _)| n.eq_ignore_ascii_case(name)) {
                headers.push((name, "…".to_owned()));
            }
        }
    }
    for (name, value) in headers {
        writeln!(out, "{name}: {value}")?;
    }
    writeln!(out, "Content-Type: application/json\n")?;
    writeln!(out, "{}", example_body(doc))?;
    writeln!(out, "```\n")?;
    Ok(())
}

fn example(out: &mut String, doc: &OperationDoc) -> std::fmt::Result {
    let method = doc.method.as_deref().unwrap_or("POST");
    let path = doc.path.as_deref().unwrap_or("/…");
    writeln!(out, "### Example\n")?;
    request(out, doc, method, path)?;
    if doc.key_from.len() > 1 {
        writeln!(
            out,
            "Its key is `{}`: the parts, joined with `:`.\n",
            contract::example_key(doc)
        )?;
    }
    writeln!(
        out,
        "The connection drops before the response arrives. The client sends the same request \
         with the same key:\n"
    )?;
    request(out, doc, method, path)?;
    writeln!(
        out,
        "If the first request completed, the answer is its stored response with \
         `{REPLAYED_HEADER}: true`; if it is still running, `409` `{IN_FLIGHT}` with \
         `Retry-After`; if it \
         never arrived, the operation runs now, once."
    )?;
    if !contract::key_required(doc) {
        writeln!(
            out,
            "\nWithout the header the request runs like any other: a retry of it runs again."
        )?;
    }
    Ok(())
}

/// The example's body: `{ … }`, with the fields a key is taken from set to their example
/// values (`{ "id": "8e03…", … }`), in the order of the parts.
fn example_body(doc: &OperationDoc) -> String {
    let mut body = Node::Object(Vec::new());
    for (part, value) in contract::example_values(doc) {
        if let KeyPartDoc::Body(pointer) = part {
            let tokens: Vec<String> = pointer
                .split('/')
                .skip(1)
                .map(|t| t.replace("~1", "/").replace("~0", "~"))
                .collect();
            body.insert(&tokens, value);
        }
    }
    let mut text = String::new();
    body.render(&mut text, true);
    text
}

/// The example body's JSON, members in the order they were set.
#[derive(Debug)]
enum Node {
    /// A place not set: `…`.
    Unset,
    /// A string.
    Text(String),
    /// An object's members.
    Object(Vec<(String, Node)>),
    /// An array's items.
    Array(Vec<Node>),
}

impl Node {
    /// Sets the value at a JSON pointer's tokens, creating the objects (and arrays, for tokens
    /// that are indices) on the way. A pointer that runs into a value set by another is left
    /// out: the example shows what it can.
    fn insert(&mut self, tokens: &[String], value: String) {
        let Some((token, rest)) = tokens.split_first() else {
            return;
        };
        let Some(child) = self.slot(token) else {
            return;
        };
        match rest.first() {
            None => {
                if matches!(child, Self::Unset) {
                    *child = Self::Text(value);
                }
            }
            Some(next) => {
                if matches!(child, Self::Unset) {
                    *child = if index(next).is_some() {
                        Self::Array(Vec::new())
                    } else {
                        Self::Object(Vec::new())
                    };
                }
                child.insert(rest, value);
            }
        }
    }

    /// The place a token names in an object or an array (created unset), or `None` when
    /// this node cannot have it.
    fn slot(&mut self, token: &str) -> Option<&mut Self> {
        match self {
            Self::Object(members) => {
                let at = match members.iter().position(|(name, _)| name == token) {
                    Some(at) => at,
                    None => {
                        members.push((token.to_owned(), Self::Unset));
                        members.len() - 1
                    }
                };
                members.get_mut(at).map(|(_, node)| node)
            }
            Self::Array(items) => {
                let i = index(token)?;
                while items.len() <= i {
                    items.push(Self::Unset);
                }
                items.get_mut(i)
            }
            Self::Unset | Self::Text(_) => None,
        }
    }

    /// `{ "a": { "b": "v" }, … }`: JSON on one line, `…` for the fields the example leaves
    /// out (at the top level) and for what is not set.
    fn render(&self, out: &mut String, top: bool) {
        match self {
            Self::Unset => out.push('…'),
            Self::Text(text) => {
                let _ = write!(out, "{}", Value::String(text.clone()));
            }
            Self::Object(members) => {
                out.push('{');
                for (i, (name, node)) in members.iter().enumerate() {
                    out.push_str(if i == 0 { " " } else { ", " });
                    let _ = write!(out, "{}: ", Value::String(name.clone()));
                    node.render(out, false);
                }
                if top || members.is_empty() {
                    out.push_str(if members.is_empty() { " …" } else { ", …" });
                }
                out.push_str(" }");
            }
            Self::Array(items) => {
                out.push('[');
                for (i, node) in items.iter().enumerate() {
                    out.push_str(if i == 0 { " " } else { ", " });
                    node.render(out, false);
                }
                out.push_str(" ]");
            }
        }
    }
}

/// A JSON pointer token that is an array index (`0`, `12`; not `01`), small enough for an
/// example.
fn index(token: &str) -> Option<usize> {
    let digits = !token.is_empty() && token.bytes().all(|b| b.is_ascii_digit());
    if !digits || (token.len() > 1 && token.starts_with('0')) {
        return None;
    }
    token.parse().ok().filter(|i| *i < 16)
}
