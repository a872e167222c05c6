//! The key table: the keys of the listing's filters, loaded a page at a time as the
//! selection moves down, sorted as asked; the `/` prompt of a key prefix; a key's detail
//! pane; and the actions on the key selected (or shown), each through its dialog. Drawn by
//! [`table`].

pub mod table;

use std::collections::HashSet;

use idem_store::{AuditEntry, Counts, Cursor, Journal, KeyFilter, KeyRow, KeyStatus, Page};
use jiff::tz::TimeZone;
use ratatui::Frame;
use ratatui::crossterm::event::KeyCode;
use ratatui::layout::Rect;
use ratatui::text::Line;

use super::list::{self, delta};
use super::{Action, Component, Context, Input};
use crate::ui::act::{ActKind, KeyId};
use crate::ui::detail;
use crate::ui::dialog::Dialog;
use crate::ui::format::Expiry;
use crate::ui::keymap::{Do, Screen, Step};
use crate::ui::note::{Cleared, Failure, FilterSet, Note, Read};
use crate::ui::work::{Command, DetailData};

/// Keys per page of the listing (and entries of a key's audit trail shown).
pub const PAGE: u32 = KeyFilter::DEFAULT_LIMIT;
/// The next page is loaded when the selection comes this close to the last loaded key.
pub const PREFETCH: usize = 5;

/// A column of the key table, for sorting the loaded rows.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Column {
    /// Scope.
    Scope,
    /// Operation.
    Operation,
    /// Key.
    Key,
    /// Status.
    Status,
    /// Age (since created).
    Age,
    /// Expires in.
    Expires,
    /// Response status.
    Response,
}

impl Column {
    /// Columns in screen order, bound to `1`…`7`.
    pub const ALL: [Self; 7] = [
        Self::Scope,
        Self::Operation,
        Self::Key,
        Self::Status,
        Self::Age,
        Self::Expires,
        Self::Response,
    ];

    /// The column's title.
    #[must_use]
    pub fn title(self) -> &'static str {
        match self {
            Self::Scope => "scope",
            Self::Operation => "operation",
            Self::Key => "key",
            Self::Status => "status",
            Self::Age => "age",
            Self::Expires => "exp in",
            Self::Response => "resp",
        }
    }

    /// How `a` and `b` compare by this column at `now_ms`.
    fn compare(self, a: &KeyRow, b: &KeyRow, now_ms: i64) -> std::cmp::Ordering {
        let expires = |row: &KeyRow| Expiry::of(row, now_ms).at_ms().unwrap_or(i64::MAX);
        let response = |row: &KeyRow| row.response.as_ref().map(|r| r.status);
        match self {
            Self::Scope => a.scope.cmp(&b.scope),
            Self::Operation => a.operation.cmp(&b.operation),
            Self::Key => a.key.cmp(&b.key),
            Self::Status => a.status.as_str().cmp(b.status.as_str()),
            // Youngest first: the latest creation time is the smallest age.
            Self::Age => b.created_at_ms.cmp(&a.created_at_ms),
            // A key that is not final never expires: after every final one.
            Self::Expires => expires(a).cmp(&expires(b)),
            Self::Response => response(a).cmp(&response(b)),
        }
    }
}

/// The filters of the listing, applied by the database.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Filters {
    /// Only this status.
    pub status: Option<KeyStatus>,
    /// Only this scope.
    pub scope: Option<String>,
    /// Only this operation.
    pub operation: Option<String>,
    /// Only keys starting with this.
    pub key_prefix: Option<String>,
}

impl Filters {
    /// The store's filter for a page of `limit` keys after `after`.
    #[must_use]
    pub fn to_key_filter(&self, limit: u32, after: Option<Cursor>) -> KeyFilter {
        let mut filter = KeyFilter::new().limit(limit).after(after);
        filter.status = self.status;
        filter.scope.clone_from(&self.scope);
        filter.operation.clone_from(&self.operation);
        filter.key_prefix.clone_from(&self.key_prefix);
        filter
    }
}

/// The detail pane of one key.
#[derive(Debug, Clone, PartialEq)]
pub struct Detail {
    /// Which key.
    pub key: KeyId,
    /// Its row as last read; `None` once it is gone.
    pub row: Option<KeyRow>,
    /// Its audit history, newest first (`Err`: why it could not be read).
    pub audit: Option<Result<Vec<AuditEntry>, Failure>>,
    /// Its journal (staged keys).
    pub journal: Option<Result<Option<Journal>, Failure>>,
    /// Lines scrolled down.
    pub scroll: u16,
    /// A read is under way.
    pub loading: bool,
}

impl Detail {
    /// The pane's lines ([`detail::lines`]), times shown in `tz` and relative to `now_ms`.
    #[must_use]
    pub fn lines(&self, now_ms: i64, tz: &TimeZone) -> Vec<Line<'static>> {
        detail::lines(
            self.row.as_ref(),
            self.journal.as_ref(),
            self.audit.as_ref(),
            now_ms,
            tz,
        )
    }
}

/// A one-line text prompt (the `/` search).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Prompt {
    /// What is typed so far.
    pub text: String,
}

/// The key table's view.
#[derive(Debug, Clone, Default)]
pub struct KeysView {
    /// The loaded keys, in database order (scope, operation, key).
    pub rows: Vec<KeyRow>,
    /// Indexes into `rows`, in the order shown.
    pub order: Vec<usize>,
    /// The selected line (index into `order`).
    pub selected: usize,
    /// Where the next page starts; `None` once the last page is loaded.
    pub next: Option<Cursor>,
    /// A next page is being read.
    pub loading_more: bool,
    /// Bumped at every change of filters: results of older listings are dropped.
    pub generation: u64,
    /// The listing's filters.
    pub filters: Filters,
    /// The sort of the loaded rows: `None` is the database order.
    pub sort: Option<(Column, bool)>,
    /// The key table's counts, as last read.
    pub counts: Option<Counts>,
    /// The detail pane, while open.
    pub detail: Option<Detail>,
    /// The `/` prompt, while open.
    pub prompt: Option<Prompt>,
}

impl KeysView {
    /// The selected key's row.
    #[must_use]
    pub fn selected_row(&self) -> Option<&KeyRow> {
        self.order
            .get(self.selected)
            .and_then(|&i| self.rows.get(i))
    }

    /// The rows in the order shown.
    pub fn shown_rows(&self) -> impl Iterator<Item = &KeyRow> {
        self.order.iter().filter_map(|&i| self.rows.get(i))
    }

    /// What a refresh reads of the listing: as many keys as are loaded (at least a page),
    /// and the detail's key.
    #[must_use]
    pub fn refresh_query(&self) -> (KeyFilter, Option<KeyId>) {
        let loaded = u32::try_from(self.rows.len()).unwrap_or(u32::MAX);
        (
            self.filters
                .to_key_filter(loaded.clamp(PAGE, KeyFilter::MAX_LIMIT), None),
            self.detail.as_ref().map(|d| d.key.clone()),
        )
    }

    /// Lists the keys of `filters`, from the first page (the detail closed).
    pub fn set_filters(&mut self, filters: Filters) {
        self.filters = filters;
        self.detail = None;
        self.generation += 1;
        self.rows.clear();
        self.order.clear();
        self.next = None;
        self.loading_more = false;
        self.selected = 0;
    }

    /// Lists `operation`'s keys (within the other filters).
    pub fn show_operation(&mut self, operation: String) {
        self.set_filters(Filters {
            operation: Some(operation),
            ..self.filters.clone()
        });
    }

    /// Opens the `/` prompt, with the key prefix in force.
    pub fn open_prompt(&mut self) {
        self.prompt = Some(Prompt {
            text: self.filters.key_prefix.clone().unwrap_or_default(),
        });
    }

    /// Recomputes `order` after a load or a change of sort, keeping `keep` selected.
    fn resort(&mut self, keep: Option<KeyId>, now_ms: i64) {
        let mut order: Vec<usize> = (0..self.rows.len()).collect();
        if let Some((column, descending)) = self.sort {
            let rows = &self.rows;
            order.sort_by(|&a, &b| {
                let ord = column.compare(&rows[a], &rows[b], now_ms);
                if descending { ord.reverse() } else { ord }
            });
        }
        self.order = order;
        if let Some(keep) = keep
            && let Some(at) = self
                .order
                .iter()
                .position(|&i| self.rows.get(i).is_some_and(|r| KeyId::of(r) == keep))
        {
            self.selected = at;
        }
        self.selected = self.selected.min(self.order.len().saturating_sub(1));
    }

    /// The next page, when the selection is near the end of the loaded keys and no read of
    /// the listing is under way.
    pub fn maybe_load_more(&mut self, refreshing: bool) -> Option<Command> {
        if self.loading_more || refreshing {
            return None;
        }
        let next = self.next.clone()?;
        if self.selected + PREFETCH < self.order.len() {
            return None;
        }
        self.loading_more = true;
        Some(Command::LoadMore {
            generation: self.generation,
            filter: self.filters.to_key_filter(PAGE, Some(next)),
        })
    }

    /// A refresh's first keys arrived: in place of the loaded ones, the selected key kept.
    pub fn listed(&mut self, page: Page, now_ms: i64) {
        let keep = self.selected_row().map(KeyId::of);
        self.rows = page.keys;
        self.next = page.next;
        self.resort(keep, now_ms);
    }

    /// The next page arrived (for the listing in force): its keys after the loaded ones.
    pub fn more_loaded(&mut self, result: Result<Page, Failure>, now_ms: i64) -> Option<Note> {
        self.loading_more = false;
        match result {
            Ok(page) => {
                let keep = self.selected_row().map(KeyId::of);
                let known: HashSet<KeyId> = self.rows.iter().map(KeyId::of).collect();
                self.rows.extend(
                    page.keys
                        .into_iter()
                        .filter(|r| !known.contains(&KeyId::of(r))),
                );
                self.next = page.next;
                self.resort(keep, now_ms);
                None
            }
            Err(e) => Some(Note::ReadFailed(Read::MoreKeys, e)),
        }
    }

    /// A read of `key` arrived: shown if its detail is still open.
    pub fn detail_loaded(
        &mut self,
        key: &KeyId,
        result: Result<DetailData, Failure>,
    ) -> Option<Note> {
        let detail = self.detail.as_mut().filter(|d| d.key == *key)?;
        detail.loading = false;
        match result {
            Ok(data) => {
                detail.row = data.row;
                detail.audit = Some(data.audit);
                detail.journal = Some(data.journal);
                None
            }
            Err(e) => Some(Note::ReadFailed(Read::Key(key.clone()), e)),
        }
    }

    /// `key`'s row is `current` now (`None`: gone): put in its place wherever it is shown.
    pub fn changed(&mut self, key: &KeyId, current: Option<KeyRow>, now_ms: i64) {
        let keep = self.selected_row().map(KeyId::of);
        if let Some(at) = self.rows.iter().position(|r| KeyId::of(r) == *key) {
            match &current {
                Some(row) => self.rows[at] = row.clone(),
                None => {
                    self.rows.remove(at);
                }
            }
        }
        self.resort(keep, now_ms);
        if let Some(detail) = &mut self.detail
            && detail.key == *key
        {
            detail.row = current;
        }
    }

    /// The keys of the `/` prompt: they type the prefix; `Enter` applies it, `Esc` cancels.
    pub fn on_prompt_key(&mut self, code: KeyCode) -> Option<Action> {
        let prompt = self.prompt.as_mut()?;
        match code {
            KeyCode::Esc => self.prompt = None,
            KeyCode::Enter => {
                let text = std::mem::take(&mut prompt.text);
                self.prompt = None;
                self.set_filters(Filters {
                    key_prefix: (!text.is_empty()).then_some(text),
                    ..self.filters.clone()
                });
                return Some(Action::Refresh(None));
            }
            KeyCode::Backspace => {
                prompt.text.pop();
            }
            KeyCode::Char(c) => prompt.text.push(c),
            _ => {}
        }
        None
    }

    /// Opens the selected key's detail; its reads follow.
    fn open(&mut self) -> Option<Action> {
        let row = self.selected_row()?.clone();
        let key = KeyId::of(&row);
        self.detail = Some(Detail {
            key: key.clone(),
            row: Some(row),
            audit: None,
            journal: None,
            scroll: 0,
            loading: true,
        });
        Some(Action::Run(Command::LoadDetail { key }))
    }

    /// Moves the selection, or scrolls the open detail.
    fn step(&mut self, step: Step, ctx: &Context<'_>) -> Option<Action> {
        if let Some(detail) = &mut self.detail {
            let lines = detail.lines(ctx.now_ms, ctx.tz).len();
            list::scroll(&mut detail.scroll, step, lines);
            return None;
        }
        let last = self.order.len().saturating_sub(1);
        let moved = self
            .selected
            .saturating_add_signed(delta(step, ctx.page_height));
        self.selected = moved.min(last);
        self.maybe_load_more(ctx.refreshing).map(Action::Run)
    }

    /// The next status filter, in [`KeyStatus::ALL`]'s order, then none.
    fn cycle_status(&mut self) -> Action {
        let status = match self.filters.status {
            None => Some(KeyStatus::ALL[0]),
            Some(status) => KeyStatus::ALL
                .iter()
                .position(|s| *s == status)
                .and_then(|i| KeyStatus::ALL.get(i + 1).copied()),
        };
        self.set_filters(Filters {
            status,
            ..self.filters.clone()
        });
        Action::Refresh(Some(Note::Filter(FilterSet::Keys(status))))
    }

    /// Filters by the selected key's operation (`o`) or scope (`S`); again: clears it.
    fn filter_by_selected(&mut self, operation: bool) -> Option<Action> {
        let mut filters = self.filters.clone();
        let (filter, value) = if operation {
            let value = self.selected_row().map(|r| r.operation.clone());
            (&mut filters.operation, value)
        } else {
            let value = self.selected_row().map(|r| r.scope.clone());
            (&mut filters.scope, value)
        };
        if filter.is_some() {
            *filter = None;
        } else {
            *filter = Some(value?);
        }
        self.set_filters(filters);
        Some(Action::Refresh(None))
    }

    /// Clears every filter, if any is set.
    fn clear_filters(&mut self) -> Option<Action> {
        if self.filters == Filters::default() {
            return None;
        }
        self.set_filters(Filters::default());
        Some(Action::Refresh(Some(Note::Cleared(Cleared::Keys))))
    }

    /// Sorts by the column of the digit pressed (again: reversed); `0`: database order.
    fn sort_by(&mut self, code: KeyCode, now_ms: i64) {
        // The keymap binds `0`…`7`.
        let KeyCode::Char(c @ '0'..='7') = code else {
            return;
        };
        let keep = self.selected_row().map(KeyId::of);
        let index = usize::from(u8::try_from(c).unwrap_or(b'0') - b'0');
        self.sort = match (index, self.sort) {
            (0, _) => None,
            (n, Some((column, descending))) if Column::ALL[n - 1] == column => {
                Some((column, !descending))
            }
            (n, _) => Some((Column::ALL[n - 1], false)),
        };
        self.resort(keep, now_ms);
    }

    /// The row an action applies to: the detail's, or the selected one.
    fn target(&self) -> Option<&KeyRow> {
        match &self.detail {
            Some(detail) => detail.row.as_ref(),
            None => self.selected_row(),
        }
    }
}

impl Component for KeysView {
    fn screen(&self) -> Screen {
        if self.detail.is_some() {
            Screen::Detail
        } else {
            Screen::Keys
        }
    }

    fn update(&mut self, input: Input, ctx: &Context<'_>) -> Option<Action> {
        if let Some(kind) = ActKind::on_keys(input.what) {
            return Some(Dialog::for_key(kind, self.target(), ctx.read_only).into());
        }
        match input.what {
            Do::Move(step) => self.step(step, ctx),
            Do::Open => self.open(),
            Do::Back => {
                self.detail = None;
                None
            }
            Do::CycleStatus => Some(self.cycle_status()),
            Do::FilterOperation => self.filter_by_selected(true),
            Do::FilterScope => self.filter_by_selected(false),
            Do::ClearFilters => self.clear_filters(),
            Do::Sort => {
                self.sort_by(input.code, ctx.now_ms);
                None
            }
            _ => None,
        }
    }

    fn draw(&self, frame: &mut Frame<'_>, area: Rect, ctx: &Context<'_>) {
        match &self.detail {
            Some(detail) => detail.draw(frame, area, ctx),
            None => self.draw_list(frame, area, ctx),
        }
    }

    fn close_detail(&mut self) {
        self.detail = None;
    }
}
