//! The confirmation dialog of an action: on a key (expire, release, complete, fail,
//! delete) or on the outbox (retry one message, retry all). It says what will change
//! ([`draw`]), asks for a reason (and a response, to complete or fail), and on `y` answers
//! with the database work to run ([`Dialog::on_key`]).

pub mod draw;

use idem_store::{Action, KeyRow, OutboxRow, StoredResponse};
use ratatui::crossterm::event::KeyCode;

use super::act::{ActKind, KeyId};
use super::note::Note;
use super::work::Command;
use crate::message;

/// A field of the action dialog.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Field {
    /// Why (required).
    Reason,
    /// The response status (complete and fail).
    Status,
    /// The response body (complete and fail).
    Body,
    /// The buttons: `y` confirms, `n` cancels.
    Confirm,
}

/// What an action's dialog acts on.
#[derive(Debug, Clone, PartialEq)]
pub enum Target {
    /// A key, its row as it was shown when the dialog opened: the store refuses the action
    /// if the row is not this one any more.
    Key(KeyRow),
    /// An outbox message, as it was shown: the store decides on the message as it is when
    /// the retry runs (refused if it was claimed, delivered or became due meanwhile).
    Message(OutboxRow),
    /// Every message a retry applies to when it runs.
    AllMessages,
}

/// The confirmation dialog of an action.
#[derive(Debug, Clone, PartialEq)]
pub struct Dialog {
    /// The action.
    pub kind: ActKind,
    /// What it acts on.
    pub target: Target,
    /// The reason typed so far.
    pub reason: String,
    /// The response status typed so far.
    pub status: String,
    /// The response body typed so far.
    pub body: String,
    /// Where typing goes.
    pub focus: Field,
    /// Why the last `y` was not accepted.
    pub error: Option<DialogError>,
}

/// Why a dialog's `y` is not accepted as filled in.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum DialogError {
    /// No reason given.
    NoReason,
    /// The response status is not a number.
    StatusNotANumber(String),
    /// The response status is out of range: at least this, at most 599.
    StatusOutOfRange(u16),
    /// A retry's dialog asked for a key action.
    NotAKeyAction,
}

impl std::fmt::Display for DialogError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::NoReason => {
                f.write_str("a reason is required: it is recorded in the audit trail")
            }
            Self::StatusNotANumber(status) => write!(f, "status {status:?} is not a number"),
            Self::StatusOutOfRange(lowest) => write!(f, "status must be within {lowest}..=599"),
            Self::NotAKeyAction => f.write_str("a retry acts on the outbox, not on a key"),
        }
    }
}

/// How a dialog ended, on a key.
#[derive(Debug, Clone, PartialEq)]
pub enum Answer {
    /// Cancelled: nothing is done.
    Cancelled,
    /// Confirmed: `command` does it; `note` says it is under way.
    Confirmed {
        /// What the status line says meanwhile.
        note: Box<Note>,
        /// The database work.
        command: Box<Command>,
    },
}

impl Dialog {
    /// A dialog of `kind` on `target`, its fields empty but a response's status.
    #[must_use]
    pub fn new(kind: ActKind, target: Target) -> Self {
        Self {
            kind,
            target,
            reason: String::new(),
            status: match kind {
                ActKind::Complete => "200".into(),
                ActKind::Fail => "500".into(),
                _ => String::new(),
            },
            body: String::new(),
            focus: Field::Reason,
            error: None,
        }
    }

    /// The dialog of `kind` on the key `row` (`None`: none is selected); or why none opens:
    /// the tool is read-only, no key is selected, or the action does not apply to its
    /// status.
    ///
    /// # Errors
    /// Why no dialog opens, as the status line says it.
    pub fn for_key(
        kind: ActKind,
        row: Option<&KeyRow>,
        read_only: bool,
    ) -> Result<Self, Box<Note>> {
        if read_only {
            return Err(Box::new(Note::ReadOnly(kind)));
        }
        let Some(row) = row else {
            return Err(Box::new(Note::NothingSelected(kind)));
        };
        if !kind.applies_to(row.status) {
            return Err(Box::new(Note::DoesNotApply {
                kind,
                status: row.status,
                key: KeyId::of(row),
            }));
        }
        Ok(Self::new(kind, Target::Key(row.clone())))
    }

    /// The dialog of a retry of the message `row` (`None`: none is selected) at `now_ms`;
    /// or why none opens: the tool is read-only, no message is selected, or a retry does
    /// not apply to it.
    ///
    /// # Errors
    /// Why no dialog opens, as the status line says it.
    pub fn for_retry(
        row: Option<&OutboxRow>,
        now_ms: i64,
        read_only: bool,
    ) -> Result<Self, Box<Note>> {
        let kind = ActKind::Retry;
        if read_only {
            return Err(Box::new(Note::ReadOnly(kind)));
        }
        let Some(row) = row else {
            return Err(Box::new(Note::NothingSelected(kind)));
        };
        if !row.retryable(now_ms) {
            return Err(Box::new(Note::NotRetryable {
                id: row.id,
                dedup_id: row.dedup_id.clone(),
                state: message::state(row, now_ms),
            }));
        }
        Ok(Self::new(kind, Target::Message(row.clone())))
    }

    /// The dialog of a retry of every message a retry applies to; or that the tool is
    /// read-only.
    ///
    /// # Errors
    /// The tool is read-only.
    pub fn for_retry_all(read_only: bool) -> Result<Self, Box<Note>> {
        if read_only {
            return Err(Box::new(Note::ReadOnly(ActKind::RetryAll)));
        }
        Ok(Self::new(ActKind::RetryAll, Target::AllMessages))
    }

    /// The fields in order.
    #[must_use]
    pub fn fields(&self) -> &'static [Field] {
        if self.kind.needs_response() {
            &[Field::Reason, Field::Status, Field::Body, Field::Confirm]
        } else {
            &[Field::Reason, Field::Confirm]
        }
    }

    fn step(&mut self, forward: bool) {
        let fields = self.fields();
        let at = fields.iter().position(|f| *f == self.focus).unwrap_or(0);
        let next = if forward {
            (at + 1).min(fields.len() - 1)
        } else {
            at.saturating_sub(1)
        };
        self.focus = fields[next];
    }

    fn field_mut(&mut self) -> Option<&mut String> {
        match self.focus {
            Field::Reason => Some(&mut self.reason),
            Field::Status => Some(&mut self.status),
            Field::Body => Some(&mut self.body),
            Field::Confirm => None,
        }
    }

    /// The reason, trimmed.
    ///
    /// # Errors
    /// A missing reason.
    pub fn reason(&self) -> Result<String, DialogError> {
        let reason = self.reason.trim();
        if reason.is_empty() {
            return Err(DialogError::NoReason);
        }
        Ok(reason.to_owned())
    }

    /// The response typed: its status, and its body with the content type it reads as.
    fn response(&self) -> Result<StoredResponse, DialogError> {
        let status: u16 = self
            .status
            .trim()
            .parse()
            .map_err(|_| DialogError::StatusNotANumber(self.status.trim().to_owned()))?;
        let lowest = if self.kind == ActKind::Fail { 400 } else { 100 };
        if !(lowest..=599).contains(&status) {
            return Err(DialogError::StatusOutOfRange(lowest));
        }
        let body = self.body.clone().into_bytes();
        let headers =
            if !body.is_empty() && serde_json::from_slice::<serde_json::Value>(&body).is_ok() {
                vec![("content-type".to_owned(), "application/json".to_owned())]
            } else if body.is_empty() {
                Vec::new()
            } else {
                vec![(
                    "content-type".to_owned(),
                    "text/plain; charset=utf-8".to_owned(),
                )]
            };
        Ok(StoredResponse {
            status,
            headers,
            body: body.into(),
        })
    }

    /// The key action the dialog describes, or why it cannot be done as filled in.
    ///
    /// # Errors
    /// A missing reason, a status that is not a number in 100..=599 (400..=599 to fail);
    /// a retry, which is no key action.
    pub fn action(&self) -> Result<Action, DialogError> {
        self.reason()?;
        Ok(match self.kind {
            ActKind::Expire => Action::Expire,
            ActKind::Release => Action::Release,
            ActKind::Delete => Action::Delete,
            ActKind::Complete => Action::Complete(self.response()?),
            ActKind::Fail => Action::Fail(self.response()?),
            ActKind::Retry | ActKind::RetryAll => {
                return Err(DialogError::NotAKeyAction);
            }
        })
    }

    /// A key typed in the dialog: into its field, to the next or previous field, `n` or
    /// `Esc` cancels, `y` (on the buttons) confirms if the dialog is filled in.
    pub fn on_key(&mut self, code: KeyCode) -> Option<Answer> {
        let confirming = self.focus == Field::Confirm;
        match code {
            KeyCode::Esc => return Some(Answer::Cancelled),
            KeyCode::Char('n') if confirming => return Some(Answer::Cancelled),
            KeyCode::Char('y') if confirming => return self.confirm(),
            KeyCode::Tab | KeyCode::Down => self.step(true),
            KeyCode::BackTab | KeyCode::Up => self.step(false),
            KeyCode::Enter if !confirming => self.step(true),
            KeyCode::Backspace => {
                if let Some(field) = self.field_mut() {
                    field.pop();
                }
            }
            KeyCode::Char(c) => {
                if let Some(field) = self.field_mut() {
                    field.push(c);
                }
            }
            _ => {}
        }
        None
    }

    /// `y`: the work to run, or why not (shown in the dialog, the focus on what to fix).
    fn confirm(&mut self) -> Option<Answer> {
        let Target::Key(shown) = &self.target else {
            return self.confirm_retry();
        };
        match self.action() {
            Ok(action) => {
                let key = KeyId::of(shown);
                let note = Note::Acting {
                    action: action.name(),
                    key: key.clone(),
                };
                let command = Command::Act {
                    key,
                    expected: Box::new(shown.clone()),
                    action,
                    reason: self.reason.trim().to_owned(),
                };
                Some(Answer::Confirmed {
                    note: Box::new(note),
                    command: Box::new(command),
                })
            }
            Err(e) => {
                self.error = Some(e);
                self.focus = if self.reason.trim().is_empty() {
                    Field::Reason
                } else {
                    Field::Status
                };
                None
            }
        }
    }

    /// `y` on a retry: the retry to run, or that a reason is missing.
    fn confirm_retry(&mut self) -> Option<Answer> {
        match self.reason() {
            Ok(reason) => {
                let id = match &self.target {
                    Target::Message(row) => Some(row.id),
                    _ => None,
                };
                let note = Note::Retrying(id);
                let command = Command::Retry { id, reason };
                Some(Answer::Confirmed {
                    note: Box::new(note),
                    command: Box::new(command),
                })
            }
            Err(e) => {
                self.error = Some(e);
                self.focus = Field::Reason;
                None
            }
        }
    }
}
