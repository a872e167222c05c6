//! `sweep`: deletes keys that expired more than a grace period ago, batch by batch.

use std::time::Duration;

use idem_spec::{DurationError, parse_duration};
use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};
use serde_json::json;

use super::context::Context;
use crate::cli::SweepArgs;
use crate::error::CommandError;
use crate::format::{self, rfc3339};
use crate::output::Report;

/// The pause between two batches, leaving the database's write capacity to requests.
const PAUSE: Duration = Duration::from_millis(10);

/// Sweeps (or, with `--dry-run`, counts) the keys that expired before now − grace.
pub(super) async fn sweep(context: &Context, args: SweepArgs) -> Result<Report, CommandError> {
    let grace = grace(&args.grace)?;
    if !args.dry_run {
        context.writable("sweep")?;
    }
    let now = format::now_ms();
    let grace_ms = i64::try_from(grace.as_millis()).unwrap_or(i64::MAX);
    let before = now.saturating_sub(grace_ms);
    if args.dry_run {
        let sweepable = context.db.count_sweepable(before).await?;
        let json = json!({
            "dry_run": true,
            "expired_before": rfc3339(before),
            "would_delete": sweepable,
            "deleted": 0,
        });
        let text = format!(
            "{sweepable} {} expired before {} UTC (dry run: nothing deleted)\n",
            keys(sweepable),
            format::short_time(before)
        );
        return Ok(Report { json, text });
    }

    // A progress bar on a terminal only (indicatif hides it when stderr is not one); its
    // length costs a count, made only when the bar shows.
    let target = if context.json {
        ProgressDrawTarget::hidden()
    } else {
        ProgressDrawTarget::stderr()
    };
    let length = if target.is_hidden() {
        None
    } else {
        Some(context.db.count_sweepable(before).await?)
    };
    let bar = ProgressBar::with_draw_target(length, target);
    if let Ok(style) = ProgressStyle::with_template("{bar:40} {pos}/{len} keys deleted ({eta})") {
        bar.set_style(style);
    }
    let mut deleted: u64 = 0;
    let mut batches: u64 = 0;
    loop {
        let n = context.db.sweep_batch(before, args.batch).await?;
        deleted += n;
        batches += 1;
        bar.inc(n);
        if n < u64::from(args.batch) {
            break;
        }
        tokio::time::sleep(PAUSE).await;
    }
    bar.finish_and_clear();
    let json = json!({
        "dry_run": false,
        "expired_before": rfc3339(before),
        "deleted": deleted,
        "batches": batches,
    });
    let text = format!(
        "deleted {deleted} {} expired before {} UTC ({batches} {})\n",
        keys(deleted),
        format::short_time(before),
        if batches == 1 { "batch" } else { "batches" }
    );
    Ok(Report { json, text })
}

/// `key` or `keys`.
fn keys(n: u64) -> &'static str {
    if n == 1 { "key" } else { "keys" }
}

/// `--grace`: `7d`, `12h`, `30m`, `90s`, `1d12h`; `0s` sweeps every expired key.
fn grace(text: &str) -> Result<Duration, CommandError> {
    match parse_duration(text) {
        Ok(grace) => Ok(grace),
        Err(DurationError::Zero) => Ok(Duration::ZERO),
        Err(e) => Err(CommandError::usage(format!(
            "invalid --grace {text:?}: {e}"
        ))),
    }
}

#[cfg(test)]
mod tests {
    use super::grace;
    use std::time::Duration;

    #[test]
    fn graces() {
        assert_eq!(grace("7d").ok(), Some(Duration::from_secs(7 * 86_400)));
        assert_eq!(grace("90s").ok(), Some(Duration::from_secs(90)));
        assert_eq!(grace("0s").ok(), Some(Duration::ZERO));
        assert!(grace("7 days").is_err());
        assert!(grace("").is_err());
    }
}
