//! `idem`: the operator's terminal UI and command line for idem's key table.
//!
//! `idem` with no subcommand on a terminal opens the UI; every subcommand prints a table (or
//! one JSON document with `--json`) and works without a terminal. See `idem --help` and the
//! README's runbook.

mod db;

fn main() {
    std::process::exit(0);
}
