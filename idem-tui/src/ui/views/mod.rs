//! The views, a module each: the key table ([`keys`]), the operations ([`operations`]), the
//! outbox ([`outbox`]) and the inbox ([`inbox`]). Each is a [`Component`]: it owns its state
//! (its listing, its filter, its open detail), handles the keys pressed on it
//! ([`Component::update`], pure: what it needs done comes back as an [`Action`], database
//! work as a [`Command`] the worker runs) and draws itself ([`Component::draw`]). What
//! their lists share is in [`list`].

pub mod inbox;
pub mod keys;
pub mod list;
pub mod operations;
pub mod outbox;

use jiff::tz::TimeZone;
use ratatui::Frame;
use ratatui::crossterm::event::KeyCode;
use ratatui::layout::Rect;

use super::dialog::Dialog;
use super::keymap::{Do, Screen};
use super::note::Note;
use super::work::Command;

/// What a view reads of the state the views share.
#[derive(Debug, Clone, Copy)]
pub struct Context<'a> {
    /// The clock, as last ticked: milliseconds since the Unix epoch.
    pub now_ms: i64,
    /// Where local times are shown.
    pub tz: &'a TimeZone,
    /// Every action is refused.
    pub read_only: bool,
    /// A refresh is under way.
    pub refreshing: bool,
    /// Lines of a list on screen, for PageUp/PageDown.
    pub page_height: usize,
}

/// A key pressed on a view: what the [`keymap`](super::keymap) binds it to, and the key
/// (a digit sorts by its column, a letter names the action).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Input {
    /// What the key does.
    pub what: Do,
    /// The key.
    pub code: KeyCode,
}

/// What a view asks of the UI after a key.
#[derive(Debug, Clone, PartialEq)]
pub enum Action {
    /// Run this database work.
    Run(Command),
    /// What the view lists changed (a filter): read what is shown at once, saying `Some`
    /// note first.
    Refresh(Option<Note>),
    /// Say this in the status line.
    Say(Note),
    /// Open this dialog.
    Confirm(Dialog),
    /// Show the key table, listing this operation's keys.
    KeysOf(String),
}

/// A dialog opens, or the status line says why not.
impl From<Result<Dialog, Box<Note>>> for Action {
    fn from(dialog: Result<Dialog, Box<Note>>) -> Self {
        match dialog {
            Ok(dialog) => Self::Confirm(dialog),
            Err(why) => Self::Say(*why),
        }
    }
}

/// A view: its state, what keys do to it, and how it is drawn.
pub trait Component {
    /// Where its keys go: its list, or its detail while one is open.
    fn screen(&self) -> Screen;

    /// Handles a key bound on its [`screen`](Self::screen); pure.
    fn update(&mut self, input: Input, ctx: &Context<'_>) -> Option<Action>;

    /// Draws it in `area`.
    fn draw(&self, frame: &mut Frame<'_>, area: Rect, ctx: &Context<'_>);

    /// Closes its detail, if one is open.
    fn close_detail(&mut self);
}
