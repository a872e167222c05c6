//! `sweep`: deletes expired idempotency keys once and reports how long it took.
//!
//! ```text
//! DATABASE_URL=postgres://… cargo run --release -p idem-examples --bin sweep -- [GRACE_SECS] [BATCH] [PAUSE_MS]
//! ```
//!
//! Prints one JSON line: `{"deleted": …, "seconds": …, "rows_per_second": …}`. The `orders`
//! and `payments` servers sweep by themselves every ten minutes; this is for operators and
//! the benchmarks.
//! `DATABASE_URL` is a direct URL: the sweep does not go through a transaction pooler.

#![allow(clippy::print_stdout)] // a command-line tool: its result goes to stdout

use std::error::Error;
use std::process::ExitCode;
use std::time::{Duration, Instant};

use idem_runtime::sqlx::{MySql, Postgres, Sqlite};
use idem_runtime::store::Backend;
use idem_runtime::{Config, Idem};

#[tokio::main]
async fn main() -> ExitCode {
    match run().await {
        Ok(()) => ExitCode::SUCCESS,
        Err(error) => {
            eprintln!("sweep: {error}");
            ExitCode::FAILURE
        }
    }
}

async fn run() -> Result<(), Box<dyn Error>> {
    let url = std::env::var("DATABASE_URL").map_err(|_| "DATABASE_URL is not set")?;
    let mut args = std::env::args().skip(1);
    let grace = Duration::from_secs(args.next().map_or(Ok(0), |a| a.parse())?);
    let batch: u32 = args.next().map_or(Ok(500), |a| a.parse())?;
    let pause = Duration::from_millis(args.next().map_or(Ok(20), |a| a.parse())?);
    if url.starts_with("postgres") {
        sweep::<Postgres>(&url, grace, batch, pause).await
    } else if url.starts_with("mysql") || url.starts_with("mariadb") {
        sweep::<MySql>(&url, grace, batch, pause).await
    } else {
        sweep::<Sqlite>(&url, grace, batch, pause).await
    }
}

async fn sweep<DB: Backend>(
    url: &str,
    grace: Duration,
    batch: u32,
    pause: Duration,
) -> Result<(), Box<dyn Error>> {
    let idem = Idem::<DB>::connect(url, Config::default().max_connections(1)).await?;
    let started = Instant::now();
    let deleted = idem.sweep_expired(grace, batch, pause).await?;
    let seconds = started.elapsed().as_secs_f64();
    #[allow(clippy::cast_precision_loss)] // a rate for humans
    let rate = deleted as f64 / seconds.max(f64::EPSILON);
    println!(
        "{}",
        serde_json::json!({"deleted": deleted, "seconds": seconds, "rows_per_second": rate})
    );
    Ok(())
}
