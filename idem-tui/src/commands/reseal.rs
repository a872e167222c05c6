//! `keys reseal`: every key's sealed values written again under the current storage key,
//! batch by batch, each key audited, resumable after an interruption.

use std::time::{Duration, Instant};

use idem_store::{Actor, Cursor, Resealed, ResealedRows};
use serde_json::json;

use super::context::Context;
use crate::cli::ResealArgs;
use crate::error::CommandError;
use crate::format;
use crate::output::Report;

/// The pause between two batches, leaving the database's write capacity to requests.
const PAUSE: Duration = Duration::from_millis(10);
/// How often progress is told on stderr, at most (and after the last batch).
const PROGRESS_EVERY: Duration = Duration::from_secs(1);

/// Reseals every key from `--after` (or the first) to the last, then reports the totals.
pub(super) async fn reseal(context: &Context, args: ResealArgs) -> Result<Report, CommandError> {
    let after = args.after.as_deref().map(cursor).transpose()?;
    let Some(ring) = context.db.keyring() else {
        return Err(CommandError::usage(
            "keys reseal needs the storage keys: pass --storage-keys or set IDEM_STORAGE_KEYS, \
             the key to seal under first, then every key that sealed values still in use",
        ));
    };
    context.writable("reseal")?;
    let sealing = ring.current().to_owned();
    let mut actor = Actor::new(context.operator.clone());
    if let Some(reason) = &args.reason {
        actor = actor.reason(reason.clone());
    }
    let mut total = Resealed {
        next: after,
        ..Resealed::default()
    };
    let (mut batches, mut told) = (0_u64, Instant::now());
    loop {
        let from = total.next.clone();
        let batch = (context.db)
            .reseal(from.as_ref(), args.batch, &actor, format::now_ms())
            .await
            .map_err(|error| resumable(error.into(), from.as_ref()))?;
        total.add(batch);
        batches += 1;
        let done = total.next.is_none();
        if done || told.elapsed() >= PROGRESS_EVERY {
            eprintln!("{}", progress(&total, batches));
            told = Instant::now();
        }
        if done {
            break;
        }
        tokio::time::sleep(PAUSE).await;
    }
    // Then the outbox's payloads and the inbox's bodies, which an old key may seal too.
    let outbox = beside(context, args.batch, Area::Outbox).await?;
    let inbox = beside(context, args.batch, Area::Inbox).await?;
    let mut text = totals(&total, &sealing, batches);
    text.push_str(&rows_totals(&outbox, "outbox message"));
    text.push_str(&rows_totals(&inbox, "inbox event"));
    let json = json!({
        "action": "reseal",
        "storage_key": sealing,
        "resealed": total.resealed,
        "current": total.current,
        "skipped": total.unknown_keys,
        "unreadable": total.unreadable,
        "batches": batches,
        "operator": context.operator,
        "reason": args.reason,
        "outbox": rows_json(&outbox),
        "inbox": rows_json(&inbox),
    });
    Ok(Report { json, text })
}

/// The tables beside the key table a reseal goes through after it.
#[derive(Clone, Copy)]
enum Area {
    Outbox,
    Inbox,
}

/// Reseals the whole of `area`, batch by batch.
async fn beside(context: &Context, batch: u32, area: Area) -> Result<ResealedRows, CommandError> {
    let mut total = ResealedRows::default();
    loop {
        let after = total.next.unwrap_or(0);
        let done = match area {
            Area::Outbox => context.db.outbox_reseal(after, batch).await,
            Area::Inbox => context.db.inbox_reseal(after, batch).await,
        };
        total.add(done.map_err(CommandError::from)?);
        if total.next.is_none() {
            return Ok(total);
        }
        tokio::time::sleep(PAUSE).await;
    }
}

/// A line of totals of the outbox or the inbox, for people; nothing when it is empty.
fn rows_totals(total: &ResealedRows, what: &str) -> String {
    let skipped: u64 = total.unknown_keys.values().sum();
    if total.resealed + total.current + skipped == 0 && total.unreadable.is_empty() {
        return String::new();
    }
    let mut line = format!(
        "{what}s: {} resealed, {} already under it",
        total.resealed, total.current
    );
    if skipped > 0 {
        let by_key: Vec<String> = (total.unknown_keys.iter())
            .map(|(key, n)| format!("{key} ({n})"))
            .collect();
        line.push_str(&format!(
            ", left under storage keys not given: {}",
            by_key.join(", ")
        ));
    }
    line.push('\n');
    for why in &total.unreadable {
        line.push_str(&format!("  left as it is, unreadable: {why}\n"));
    }
    line
}

fn rows_json(total: &ResealedRows) -> serde_json::Value {
    json!({
        "resealed": total.resealed,
        "current": total.current,
        "skipped": total.unknown_keys,
        "unreadable": total.unreadable,
    })
}

/// `--after`: a cursor a run printed.
fn cursor(text: &str) -> Result<Cursor, CommandError> {
    text.parse().map_err(|_| {
        CommandError::usage(format!(
            "invalid --after {text:?}: not a cursor `keys reseal` printed"
        ))
    })
}

/// `error`, which stopped a run, saying where to resume it from (`from`: the batch that
/// failed started after it; nothing of that batch was changed).
fn resumable(mut error: CommandError, from: Option<&Cursor>) -> CommandError {
    if let Some(from) = from {
        error.message = format!("{} (resume with --after {from})", error.message);
    }
    error
}

/// One line of progress: the totals so far, and where to resume from.
fn progress(total: &Resealed, batches: u64) -> String {
    let mut line = format!(
        "reseal: {} resealed, {} current, {} skipped, {} unreadable ({batches} {})",
        total.resealed,
        total.current,
        total.skipped(),
        total.unreadable.len(),
        if batches == 1 { "batch" } else { "batches" }
    );
    match &total.next {
        Some(next) => line.push_str(&format!("; resume with --after {next}")),
        None => line.push_str("; done"),
    }
    line
}

/// The totals, for people.
fn totals(total: &Resealed, sealing: &str, batches: u64) -> String {
    let mut text = format!(
        "resealed {} under storage key {sealing}; {} already under it ({batches} {})\n",
        keys(total.resealed),
        keys(total.current),
        if batches == 1 { "batch" } else { "batches" }
    );
    if !total.unknown_keys.is_empty() {
        let by_key: Vec<String> = (total.unknown_keys.iter())
            .map(|(key, n)| format!("{key} ({})", keys(*n)))
            .collect();
        text.push_str(&format!(
            "left as they are, sealed under storage keys not given: {}; give those keys too \
             and run it again to reseal them\n",
            by_key.join(", ")
        ));
    }
    if !total.unreadable.is_empty() {
        text.push_str("left as they are, unreadable:\n");
        for why in &total.unreadable {
            text.push_str(&format!("  {}\n", why));
        }
    }
    text
}

/// `1 key`, `2 keys`.
fn keys(n: u64) -> String {
    format!("{n} {}", if n == 1 { "key" } else { "keys" })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn totals_name_what_was_left() {
        let mut total = Resealed {
            resealed: 3,
            current: 1,
            ..Resealed::default()
        };
        assert_eq!(
            totals(&total, "k2", 2),
            "resealed 3 keys under storage key k2; 1 key already under it (2 batches)\n"
        );
        total.unknown_keys.insert("k0".into(), 2);
        total
            .unreadable
            .push("(\"global\", \"op:v1\", \"k\"): the fingerprint: …".into());
        let text = totals(&total, "k2", 1);
        assert!(
            text.contains("storage keys not given: k0 (2 keys)"),
            "{text}"
        );
        assert!(text.contains("unreadable:\n  (\"global\""), "{text}");
        assert!(progress(&total, 1).ends_with("1 unreadable (1 batch); done"));
    }
}
