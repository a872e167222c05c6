//! The terminal UI: `idem` with no subcommand on a terminal.
//!
//! A live view of the key table: a header with the database (password redacted), the keys by
//! status and the time of the last refresh; the key table (scope, operation, key, status,
//! age, expires in, response status), filtered in the database and loaded a page at a time
//! as the selection moves down (keyset pagination: the whole table is never read); a detail
//! pane with every column of a key, its response (JSON highlighted, binary bodies as their
//! size and a hex head), its journal and its audit history; an operations view with each
//! operation's counts by status (and its ttl, scope and mode when registered); an outbox
//! view with the transactional outbox's messages (status, attempts, next attempt, age, last
//! error) and a message's detail (its columns, payload and audit history); an inbox view
//! with the incoming events a receiver could not apply (event id, source, status, age,
//! deliveries, reason) and an event's detail (its columns, reason and body), read-only; and
//! the operator actions, each behind a confirmation dialog that says what will change and
//! asks for a reason recorded in the audit trail: on keys, and the outbox's retries.
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
//! Elm-like: [`app::App`] is the state, [`app::update`] applies a [`app::Msg`] (a key, a
//! tick of the clock, a database result) and returns the [`app::Command`] to run, if any
//! (a key: what [`keymap::action`] finds for it); [`view::view`] draws the state;
//! [`detail::lines`] are the detail pane's lines, which the view draws and `update` scrolls
//! within. [`run`] is the loop: it draws, waits for a terminal event, a tick or a result, and
//! runs each command on its own task, so drawing never waits for the database. Errors go to
//! the status line.

pub mod app;
pub mod detail;
pub mod format;
pub mod keymap;
pub mod note;
pub mod view;

#[cfg(test)]
mod fixtures;
#[cfg(test)]
mod render_tests;

use std::time::Duration;

use futures_util::StreamExt as _;
use idem_store::{Actor, AuditFilter, OperationInfo};
use jiff::tz::TimeZone;
use ratatui::crossterm::event::Event;
use tokio::sync::mpsc;

use crate::db::Db;
use app::{ActError, App, Command, DetailData, MessageData, Msg, Refreshed, Retried, update};
use note::{Failure, Note};

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
        terminal.draw(|frame| view::view(&app, frame))?;
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
            let db = db.clone();
            let operator = options.operator.clone();
            let tx = tx.clone();
            tokio::spawn(async move {
                let fallback = command.clone();
                let work = tokio::spawn(async move { execute(&db, &operator, command).await });
                // A task that failed still answers, so that nothing stays "under way".
                let msg = match work.await {
                    Ok(msg) => msg,
                    Err(e) => failed(fallback, Failure::Task(std::sync::Arc::new(e))),
                };
                // The loop is gone when the user quit: nobody is waiting for the result.
                let _ = tx.send(msg);
            });
        }
        if app.quit {
            break;
        }
    }
    Ok(())
}

/// The answer to `command` when its task died (`why`) before it could answer.
fn failed(command: Command, why: Failure) -> Msg {
    match command {
        Command::Refresh { generation, .. } => Msg::Refreshed {
            generation,
            result: Err(why),
        },
        Command::LoadMore { generation, .. } => Msg::MoreLoaded {
            generation,
            result: Err(why),
        },
        Command::LoadDetail { key } => Msg::DetailLoaded {
            key,
            result: Err(why),
        },
        Command::Act { key, action, .. } => Msg::Acted {
            key,
            action: action.name(),
            result: Err(ActError::Failed(why)),
        },
        Command::LoadMessage { id } => Msg::MessageLoaded {
            id,
            result: Err(why),
        },
        Command::Retry { id, .. } => Msg::Retried {
            id,
            result: Err(ActError::Failed(why)),
        },
    }
}

/// Reads an outbox message and its audit history.
async fn read_message(db: &Db, id: i64) -> Result<MessageData, Failure> {
    let row = db.outbox_find(id).await.map_err(Failure::from)?;
    let audit = match &row {
        Some(row) => db
            .audit(&AuditFilter::new().key(row.audit_key()).limit(app::PAGE))
            .await
            .map_err(Failure::from),
        None => Ok(Vec::new()),
    };
    Ok(MessageData { row, audit })
}

/// Reads a key, its audit history and its journal.
async fn read_detail(db: &Db, key: &app::KeyId, now_ms: i64) -> Result<DetailData, Failure> {
    let row = db.get(key.as_ref(), now_ms).await.map_err(Failure::from)?;
    let audit = db
        .audit(&AuditFilter::new().key(key.as_ref()).limit(app::PAGE))
        .await
        .map_err(Failure::from);
    let journal = db.journal(key.as_ref()).await.map_err(Failure::from);
    Ok(DetailData {
        row,
        audit,
        journal,
    })
}

/// Runs `command` on the database; its result as a message.
async fn execute(db: &Db, operator: &str, command: Command) -> Msg {
    let now = now_ms();
    match command {
        Command::Refresh {
            generation,
            count,
            filter,
            detail,
            outbox,
            message,
            inbox,
            event,
        } => {
            let result = async {
                let page = db.list(&filter, now).await.map_err(Failure::from)?;
                let detail = match detail {
                    Some(key) => {
                        let data = read_detail(db, &key, now).await;
                        Some((key, data))
                    }
                    None => None,
                };
                let (counts, operations) = if count {
                    let counts = db.counts(now).await.map_err(Failure::from)?;
                    let operations = operations(db, &counts).await;
                    (Some(counts), Some(operations))
                } else {
                    (None, None)
                };
                let outbox = match outbox {
                    Some(query) => {
                        let messages = db.outbox_list(query.status, query.limit).await;
                        Some((query, messages.map_err(Failure::from)))
                    }
                    None => None,
                };
                let message = match message {
                    Some(id) => Some((id, read_message(db, id).await)),
                    None => None,
                };
                let inbox = match inbox {
                    Some(query) => {
                        let events = db.inbox_list(query.status, query.limit).await;
                        Some((query, events.map_err(Failure::from)))
                    }
                    None => None,
                };
                let event = match event {
                    Some(event_id) => {
                        let events = db.inbox_get(&event_id).await;
                        Some((event_id, events.map_err(Failure::from)))
                    }
                    None => None,
                };
                // A database without the outbox's table still shows its keys.
                let outbox_counts = if count {
                    db.outbox_counts(now).await.ok()
                } else {
                    None
                };
                Ok(Box::new(Refreshed {
                    counts,
                    operations,
                    page,
                    detail,
                    outbox_counts,
                    outbox,
                    message,
                    inbox,
                    event,
                }))
            }
            .await;
            Msg::Refreshed { generation, result }
        }
        Command::LoadMore { generation, filter } => Msg::MoreLoaded {
            generation,
            result: db.list(&filter, now).await.map_err(Failure::from),
        },
        Command::LoadDetail { key } => {
            let result = read_detail(db, &key, now).await.map(Box::new);
            Msg::DetailLoaded { key, result }
        }
        Command::Act {
            key,
            expected,
            action,
            reason,
        } => {
            let by = Actor::new(operator).reason(reason);
            let result = db
                .act(key.as_ref(), &expected, &action, &by, now)
                .await
                .map(|acted| acted.audit_id)
                .map_err(ActError::from);
            Msg::Acted {
                key,
                action: action.name(),
                result,
            }
        }
        Command::LoadMessage { id } => {
            let result = read_message(db, id).await.map(Box::new);
            Msg::MessageLoaded { id, result }
        }
        Command::Retry { id, reason } => {
            let by = Actor::new(operator).reason(reason);
            let result = match id {
                Some(id) => db
                    .outbox_retry(id, now, &by)
                    .await
                    .map(|row| Retried::One(Box::new(row))),
                None => db.outbox_retry_all(now, &by).await.map(Retried::All),
            };
            Msg::Retried {
                id,
                result: result.map_err(ActError::from),
            }
        }
    }
}

/// The operations view's lines: every registered operation and every operation with keys;
/// when the registry cannot be read (a database not migrated to it yet), the operations of
/// `counts`.
async fn operations(db: &Db, counts: &idem_store::Counts) -> Vec<OperationInfo> {
    match db.registrations().await {
        Ok(registrations) => OperationInfo::merge(counts, registrations),
        Err(_) => app::operations_from_counts(counts),
    }
}
