//! The terminal UI: `idem` with no subcommand on a terminal.
//!
//! A live view of the key table: a header with the database (password redacted), the keys by
//! status and the time of the last refresh; the key table (scope, operation, key, status,
//! age, expires in, response status), filtered in the database and loaded a page at a time
//! as the selection moves down (keyset pagination: the whole table is never read); a detail
//! pane with every column of a key, its response (JSON highlighted, binary bodies as their
//! size and a hex head), its journal, the provider key each recorded step of a staged key
//! sent, and its audit history; an operations view with each operation's counts by status
//! (and its ttl, scope and mode when registered); an outbox view with the transactional
//! outbox's messages (status, attempts, next attempt, age, last error) and a message's
//! detail (its columns, payload and audit history); an inbox view with the incoming events
//! a receiver could not apply (event id, source, status, age, deliveries, reason) and an
//! event's detail (its columns, reason and body), read-only; and the operator actions,
//! each behind a confirmation dialog that says what will change and asks for a reason
//! recorded in the audit trail: on keys, and the outbox's retries.
//!
//! # Key bindings
//!
//! Every binding is a line of one table, [`keymap::BINDINGS`]: its keys, what they do, the
//! screens where they do it, its line in the help (`?`) and its hint in the footers. The key
//! handler looks keys up in it; the footers and the help are drawn from it. In a dialog and
//! in the `/` prompt the keys type, but for the few the [`keymap`] module names.
//!
//! The keys on screen (and an open detail) are read again every 2 s, and so are the outbox's
//! messages while its view (or a message's detail) is shown, and the inbox's events while
//! its view (or an event's detail) is shown. The counts in the header and
//! the operations view are one pass over the whole key table (and the outbox's counts one
//! over the outbox), so they are read every 10 s, after an action, and right after the
//! first screen — which shows the first page of keys without waiting for them. The outbox
//! view reads the first 500 messages of its filter, oldest first (the store lists messages
//! without pages); the `Outbox` tab says how many messages are dead, whatever the view. The
//! inbox view likewise reads the first 500 events of its filter, the longest noted first,
//! and its header counts them by status.
//!
//! The database orders keys by (scope, operation, key), the order pages are read in; a sort by
//! another column sorts the keys loaded so far.
//!
//! An action is refused when the key's row changed since it was shown (the store compares it
//! with the row on screen), when the tool runs with `--read-only`, when it does not apply
//! to the key's status (expiring a key that is not final, say), and when it could do harm:
//! the key's lease is live (an attempt is running), or it deletes a completed staged key
//! (its steps would run again). The dialog warns of the last two before `y`, and the status
//! line (as many lines as it needs) says why the store refused. The TUI never forces an
//! action: forcing is a command-line action, `idem keys <action> … --force`, recorded as
//! forced in the audit trail.
//!
//! A retry applies to a dead message (pending again, due now, attempts reset) and to a
//! pending one waiting for its next attempt (due now); the UI refuses at once a message in
//! flight, due or delivered, and the store refuses it if it became so while the dialog was
//! open. Each retry is recorded in the audit trail like the actions on keys.
//!
//! # Structure
//!
//! Components, Elm-like: [`app::App`] is the state and [`app::update`] applies a
//! [`work::Msg`] (a key, a tick of the clock, a database result) and returns the
//! [`work::Command`] to run, if any. The App holds the views ([`views`]: the key table, the
//! operations, the outbox, the inbox) and what they share — the view shown, the
//! [`dialog`], the status line ([`note`]), the live refresh — and routes: a key to the
//! dialog, the prompt or the view shown (what [`keymap::action`] finds for it), a result to
//! the views it is for. Each view owns its state, its `update` (pure: it answers with a
//! [`views::Action`]) and its drawing; [`chrome::draw`] draws the screen around the view
//! shown; [`detail`] words the detail panes. [`run`] is the loop: it draws, waits for a
//! terminal event, a tick or a result, and runs each command on its own task
//! ([`worker`], the only I/O), so drawing never waits for the database. Errors go to the
//! status line.

pub mod act;
pub mod app;
pub mod chrome;
pub mod detail;
pub mod dialog;
pub mod format;
pub mod keymap;
pub mod note;
pub mod views;
pub mod work;
pub mod worker;

#[cfg(test)]
mod fixtures;
#[cfg(test)]
mod render_tests;

use std::time::Duration;

use futures_util::StreamExt as _;
use jiff::tz::TimeZone;
use ratatui::crossterm::event::Event;
use tokio::sync::mpsc::{self, UnboundedSender};

use crate::db::Db;
use app::{App, update};
use note::{Failure, Note};
use work::{Command, Msg};

/// How the UI was started.
#[derive(Debug, Clone)]
pub struct Options {
    /// The database URL, redacted, for the header.
    pub database: String,
    /// Who acts: recorded in the audit trail with every action.
    pub operator: String,
    /// Refuse every action.
    pub read_only: bool,
}

/// How often the clock ticks (and a due refresh starts).
const TICK: Duration = Duration::from_millis(250);

/// Restores the terminal when dropped: on every return, error or not. (A panic restores it
/// too: [`ratatui::try_init`] installs a panic hook that does.)
struct Restore;

impl Drop for Restore {
    fn drop(&mut self) {
        ratatui::restore();
    }
}

/// Milliseconds since the Unix epoch.
fn now_ms() -> i64 {
    jiff::Timestamp::now().as_millisecond()
}

/// Runs the UI on the terminal until the user quits.
///
/// # Errors
/// The terminal cannot be set up or drawn on. Database errors never end it: they show in
/// the status line.
pub async fn run(db: Db, options: Options) -> std::io::Result<()> {
    let mut app = App::new(
        options.database,
        options.operator.clone(),
        options.read_only,
        TimeZone::system(),
    );
    app.now_ms = now_ms();
    let mut terminal = ratatui::try_init()?;
    let _restore = Restore;
    let (tx, mut rx) = mpsc::unbounded_channel::<Msg>();
    let mut events = crossterm::event::EventStream::new();
    let mut tick = tokio::time::interval(TICK);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Skip);
    loop {
        let size = terminal.size()?;
        // Header 3, footer 1, the table's borders and header row 3.
        app.page_height = usize::from(size.height.saturating_sub(7)).max(1);
        terminal.draw(|frame| chrome::draw(&app, frame))?;
        let msg = tokio::select! {
            _ = tick.tick() => Msg::Tick { now_ms: now_ms() },
            Some(msg) = rx.recv() => msg,
            event = events.next() => match event {
                Some(Ok(Event::Key(key))) => Msg::Key(key),
                // A resize (or anything else) only needs the redraw at the top of the loop.
                Some(Ok(_)) => continue,
                Some(Err(e)) => {
                    app.status = Some(Note::Terminal(e.to_string()));
                    continue;
                }
                None => break,
            },
        };
        if let Some(command) = update(&mut app, msg) {
            spawn(db.clone(), options.operator.clone(), command, tx.clone());
        }
        if app.quit {
            break;
        }
    }
    Ok(())
}

/// Runs `command` on its own task, as `operator`; its answer goes to `tx`.
fn spawn(db: Db, operator: String, command: Command, tx: UnboundedSender<Msg>) {
    tokio::spawn(async move {
        let fallback = command.clone();
        let work =
            tokio::spawn(async move { worker::execute(&db, &operator, command, now_ms()).await });
        // A task that failed still answers, so that nothing stays "under way".
        let msg = match work.await {
            Ok(msg) => msg,
            Err(e) => worker::failed(fallback, Failure::Task(std::sync::Arc::new(e))),
        };
        // The loop is gone when the user quit: nobody is waiting for the result.
        let _ = tx.send(msg);
    });
}
