//! The worker: runs the UI's database work ([`Command`]) and answers with its result as a
//! [`Msg`] ([`execute`]), or with the failure of a task that died before it could
//! ([`failed`]). The UI's only I/O with the database.

use idem_store::{Actor, AuditFilter, Counts, KeyFilter, OperationInfo};

use super::act::KeyId;
use super::note::{ActError, Failure};
use super::views::keys::PAGE;
use super::work::{
    Command, DetailData, InboxQuery, MessageData, Msg, OutboxQuery, Refreshed, Retried,
};
use crate::db::Db;

/// The answer to `command` when its task died (`why`) before it could answer.
pub fn failed(command: Command, why: Failure) -> Msg {
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

/// Runs `command` on the database at `now` (milliseconds since the Unix epoch), as
/// `operator`; its result as a message.
pub async fn execute(db: &Db, operator: &str, command: Command, now: i64) -> Msg {
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
            let what = Shown {
                filter,
                detail,
                outbox,
                message,
                inbox,
                event,
            };
            let result = refresh(db, count, what, now).await.map(Box::new);
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
            let result = retry(db, id, now, &by).await;
            Msg::Retried { id, result }
        }
    }
}

/// What a refresh reads: what is shown.
struct Shown {
    /// The keys' listing.
    filter: KeyFilter,
    /// The key detail's key.
    detail: Option<KeyId>,
    /// The outbox's listing.
    outbox: Option<OutboxQuery>,
    /// The message detail's message.
    message: Option<i64>,
    /// The inbox's listing.
    inbox: Option<InboxQuery>,
    /// The event detail's event id.
    event: Option<String>,
}

/// Reads what is shown, and with `count` the counts and the operations.
async fn refresh(db: &Db, count: bool, shown: Shown, now: i64) -> Result<Refreshed, Failure> {
    let page = db.list(&shown.filter, now).await.map_err(Failure::from)?;
    let detail = match shown.detail {
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
    let outbox = match shown.outbox {
        Some(query) => {
            let messages = db.outbox_list(query.status, query.limit).await;
            Some((query, messages.map_err(Failure::from)))
        }
        None => None,
    };
    let message = match shown.message {
        Some(id) => Some((id, read_message(db, id).await)),
        None => None,
    };
    let inbox = match shown.inbox {
        Some(query) => {
            let events = db.inbox_list(query.status, query.limit).await;
            Some((query, events.map_err(Failure::from)))
        }
        None => None,
    };
    let event = match shown.event {
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
    Ok(Refreshed {
        counts,
        operations,
        page,
        detail,
        outbox_counts,
        outbox,
        message,
        inbox,
        event,
    })
}

/// Retries message `id` (`None`: every message a retry applies to) as `by`.
async fn retry(db: &Db, id: Option<i64>, now: i64, by: &Actor) -> Result<Retried, ActError> {
    let result = match id {
        Some(id) => db
            .outbox_retry(id, now, by)
            .await
            .map(|row| Retried::One(Box::new(row))),
        None => db.outbox_retry_all(now, by).await.map(Retried::All),
    };
    result.map_err(ActError::from)
}

/// Reads an outbox message and its audit history.
async fn read_message(db: &Db, id: i64) -> Result<MessageData, Failure> {
    let row = db.outbox_find(id).await.map_err(Failure::from)?;
    let audit = match &row {
        Some(row) => db
            .audit(&AuditFilter::new().key(row.audit_key()).limit(PAGE))
            .await
            .map_err(Failure::from),
        None => Ok(Vec::new()),
    };
    Ok(MessageData { row, audit })
}

/// Reads a key, its audit history and its journal.
async fn read_detail(db: &Db, key: &KeyId, now_ms: i64) -> Result<DetailData, Failure> {
    let row = db.get(key.as_ref(), now_ms).await.map_err(Failure::from)?;
    let audit = db
        .audit(&AuditFilter::new().key(key.as_ref()).limit(PAGE))
        .await
        .map_err(Failure::from);
    let journal = db.journal(key.as_ref()).await.map_err(Failure::from);
    Ok(DetailData {
        row,
        audit,
        journal,
    })
}

/// The operations view's lines: every registered operation and every operation with keys;
/// when the registry cannot be read (a database not migrated to it yet), the operations of
/// `counts`.
async fn operations(db: &Db, counts: &Counts) -> Vec<OperationInfo> {
    match db.registrations().await {
        Ok(registrations) => OperationInfo::merge(counts, registrations),
        Err(_) => operations_from_counts(counts),
    }
}

/// The operations of `counts.by_operation`, without registrations: the operations view
/// when the registry cannot be read.
#[must_use]
pub fn operations_from_counts(counts: &Counts) -> Vec<OperationInfo> {
    counts
        .by_operation
        .iter()
        .map(|(operation, counts)| OperationInfo {
            operation: operation.clone(),
            counts: *counts,
            registered: None,
        })
        .collect()
}
