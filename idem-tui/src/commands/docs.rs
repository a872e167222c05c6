//! `docs`: the client's contract of every registered operation, as Markdown or OpenAPI 3.1,
//! rendered from the documents services record in the database (`Idem::register_docs`), the
//! same as the services serve themselves — without their binaries.

use idem_docs::OperationDoc;
use serde_json::json;

use super::context::Context;
use crate::cli::{DocsArgs, DocsFormat};
use crate::error::CommandError;

use crate::output::Report;

/// The documents of the registered operations.
pub(super) async fn docs(context: &Context, args: DocsArgs) -> Result<Report, CommandError> {
    let registrations = context.db.registrations().await?;
    let mut docs = Vec::new();
    for registration in registrations {
        let Some(text) = registration.doc else {
            continue;
        };
        let doc: OperationDoc = serde_json::from_str(&text).map_err(|e| {
            CommandError::error(format!(
                "the registered document of {} is unreadable: {e}",
                registration.operation
            ))
        })?;
        docs.push(doc);
    }
    if docs.is_empty() {
        return Err(CommandError::new(
            CommandError::NOT_FOUND,
            "no operation in this database has a registered document: services record them \
             at start (Idem::register_docs)",
        ));
    }
    let ids: Vec<&str> = docs.iter().map(|doc| doc.id.as_str()).collect();
    Ok(match args.format {
        DocsFormat::Markdown => {
            let text = idem_docs::markdown(&docs);
            Report {
                json: json!({"format": "markdown", "operations": ids, "document": text}),
                text,
            }
        }
        DocsFormat::Openapi => {
            let document = idem_docs::openapi(&docs);
            let text = format!(
                "{}\n",
                serde_json::to_string_pretty(&document).unwrap_or_else(|_| document.to_string())
            );
            Report {
                json: document,
                text,
            }
        }
    })
}
