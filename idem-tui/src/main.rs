//! `idem`: the operator's terminal UI and command line for idem's key table.
//!
//! `idem` with no subcommand on a terminal opens the UI; every subcommand prints a table (or
//! one JSON document with `--json`) and works without a terminal. See `idem --help` and the
//! README's runbook.

// The command line uses the rest of the database handle.
#[allow(dead_code)]
mod db;
mod ui;

/// Until the command line lands: `DATABASE_URL=… idem [--operator NAME] [--read-only]` opens
/// the UI (the operator defaults to `$USER`).
#[tokio::main]
async fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let mut operator = std::env::var("USER").unwrap_or_default();
    let mut read_only = false;
    let mut url = std::env::var("DATABASE_URL").ok();
    let mut i = 0;
    while i < args.len() {
        match args[i].as_str() {
            "--operator" => {
                operator = args.get(i + 1).cloned().unwrap_or_default();
                i += 1;
            }
            "--database-url" => {
                url = args.get(i + 1).cloned();
                i += 1;
            }
            "--read-only" => read_only = true,
            other => {
                eprintln!("idem: unknown argument {other}");
                std::process::exit(2);
            }
        }
        i += 1;
    }
    let Some(url) = url else {
        eprintln!("idem: set DATABASE_URL or --database-url");
        std::process::exit(2);
    };
    let db = match db::Db::connect(&url, None).await {
        Ok(db) => db,
        Err(e) => {
            eprintln!("idem: {e}");
            std::process::exit(1);
        }
    };
    let options = ui::Options {
        database: db::redact(&url),
        operator,
        read_only,
    };
    if let Err(e) = ui::run(db, options).await {
        eprintln!("idem: {e}");
        std::process::exit(1);
    }
}
