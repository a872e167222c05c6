//! The key bindings: one table, [`BINDINGS`]. The key handler looks a key up in it
//! ([`action`]) and matches on the [`Do`] it finds; the footers ([`footer`]) and the help
//! screen ([`help`]) are drawn from it.
//!
//! A binding is its keys, what they do, the [`Screen`]s where they do it, its line in the
//! help screen and its hint in the footers. In a dialog and in the `/` prompt the keys type
//! (`Backspace` erases, `Esc` cancels; `Enter` or `Tab` moves to a dialog's next field,
//! where `y` confirms and `n` cancels): only Ctrl-C is bound there.

use ratatui::crossterm::event::KeyCode::{
    BackTab, Backspace, Down, End, Enter, Esc, F, Home, PageDown, PageUp, Tab, Up,
};
use ratatui::crossterm::event::{KeyCode, KeyEvent, KeyModifiers};

use Screen::{Detail, Dialog, Event, Help, Inbox, Keys, Message, Operations, Outbox, Prompt};

/// Where a key is pressed: a screen, or what is open over it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Screen {
    /// The key table.
    Keys,
    /// The operations and their counts.
    Operations,
    /// The outbox's messages.
    Outbox,
    /// The inbox's events.
    Inbox,
    /// A key's detail.
    Detail,
    /// A message's detail.
    Message,
    /// An inbox event's detail.
    Event,
    /// The help, over a screen: any key closes it.
    Help,
    /// The `/` prompt: keys type the prefix.
    Prompt,
    /// An action's dialog: keys type into its fields.
    Dialog,
}

/// A key, as a binding names it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Key {
    /// This key, whatever the modifiers held (Shift makes `G`).
    Is(KeyCode),
    /// This letter with Ctrl held.
    Ctrl(char),
}

impl Key {
    fn matches(self, event: &KeyEvent) -> bool {
        match self {
            Self::Is(code) => event.code == code,
            Self::Ctrl(c) => {
                event.code == KeyCode::Char(c) && event.modifiers.contains(KeyModifiers::CONTROL)
            }
        }
    }
}

/// How far a move (in a list) or a scroll (in a detail) goes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Step {
    /// A line down.
    Down,
    /// A line up.
    Up,
    /// A page down.
    PageDown,
    /// A page up.
    PageUp,
    /// To the first line.
    Top,
    /// To the last line.
    Bottom,
}

/// What a key does.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Do {
    /// Quit.
    Quit,
    /// Show the help.
    Help,
    /// Pause or resume the live refresh.
    Pause,
    /// Refresh now.
    Refresh,
    /// Move the selection; in a detail, scroll.
    Move(Step),
    /// Open the selected key's, message's or event's detail; in the operations view, list
    /// the operation's keys.
    Open,
    /// Close the detail.
    Back,
    /// The next view (from a detail too, closing it).
    NextView,
    /// The previous view.
    PreviousView,
    /// Search keys by prefix: open the prompt.
    Search,
    /// Cycle the status filter (in the outbox and inbox views, the messages' and events').
    CycleStatus,
    /// Filter by the selected key's operation (again: clear it).
    FilterOperation,
    /// Filter by the selected key's scope (again: clear it).
    FilterScope,
    /// Clear every filter (in the outbox and inbox views, their status filter).
    ClearFilters,
    /// Sort the loaded keys by the column of the digit pressed (again: reverse); `0`: the
    /// database order.
    Sort,
    /// Expire the key (a dialog asks first, as for every action).
    Expire,
    /// Release the key.
    Release,
    /// Complete the key with a response.
    Complete,
    /// Fail the key with a response.
    Fail,
    /// Delete the key.
    Delete,
    /// Retry the message.
    Retry,
    /// Retry every dead message and every one waiting for its next attempt.
    RetryAll,
    /// An action on keys pressed in the outbox or the inbox: say where it applies.
    KeysOnly,
}

/// A footer's hint.
#[derive(Debug, Clone, Copy)]
pub struct Hint {
    /// The keys and what they do, in a word or two: `j/k move`.
    pub text: &'static str,
    /// The screens whose footer shows it.
    pub on: &'static [Screen],
    /// Its place in the footer, from the left.
    pub order: u8,
}

/// A binding: keys, what they do and where.
#[derive(Debug, Clone, Copy)]
pub struct Binding {
    /// The keys.
    pub keys: &'static [Key],
    /// What they do.
    pub action: Do,
    /// Where they do it.
    pub on: &'static [Screen],
    /// The help screen's line: the keys as shown, and what they do (a second line of text
    /// goes under it); `None` when another binding's line says it.
    pub help: Option<(&'static str, &'static str)>,
    /// The footers' hint.
    pub hint: Option<Hint>,
}

const fn bind(keys: &'static [Key], action: Do, on: &'static [Screen]) -> Binding {
    Binding {
        keys,
        action,
        on,
        help: None,
        hint: None,
    }
}

impl Binding {
    const fn help(self, keys: &'static str, text: &'static str) -> Self {
        Self {
            help: Some((keys, text)),
            ..self
        }
    }

    const fn hint(self, order: u8, text: &'static str, on: &'static [Screen]) -> Self {
        Self {
            hint: Some(Hint { text, on, order }),
            ..self
        }
    }
}

const fn ch(c: char) -> Key {
    Key::Is(KeyCode::Char(c))
}

const fn key(code: KeyCode) -> Key {
    Key::Is(code)
}

const LISTS: &[Screen] = &[Keys, Operations, Outbox, Inbox];
const DETAILS: &[Screen] = &[Detail, Message, Event];
const SCREENS: &[Screen] = &[Keys, Operations, Outbox, Inbox, Detail, Message, Event];
/// Where the actions on keys apply (the operations view has no key selected: they say so).
const ON_KEYS: &[Screen] = &[Keys, Operations, Detail];
const ON_MESSAGES: &[Screen] = &[Outbox, Message];
/// The inbox is read-only: nothing acts on its events.
const ON_EVENTS: &[Screen] = &[Inbox, Event];
/// `0`…`7`: sort by a column (`0`: none).
const DIGITS: &[Key] = &[
    ch('0'),
    ch('1'),
    ch('2'),
    ch('3'),
    ch('4'),
    ch('5'),
    ch('6'),
    ch('7'),
];
const EVERYWHERE: &[Screen] = &[
    Keys, Operations, Outbox, Inbox, Detail, Message, Event, Help, Prompt, Dialog,
];

/// Every binding, in the help screen's order. On a screen, the first binding with the key
/// wins: Ctrl-C comes first, so that it is not `c`.
pub const BINDINGS: &[Binding] = &[
    bind(&[Key::Ctrl('c')], Do::Quit, EVERYWHERE),
    bind(&[key(Down), ch('j')], Do::Move(Step::Down), LISTS)
        .help("j/k ↑/↓", "move; PgUp/PgDn, g/G: by page, to the ends")
        .hint(0, "j/k move", LISTS),
    bind(&[key(Down), ch('j')], Do::Move(Step::Down), DETAILS).hint(0, "j/k scroll", DETAILS),
    bind(&[key(Up), ch('k')], Do::Move(Step::Up), SCREENS),
    bind(&[key(PageDown)], Do::Move(Step::PageDown), SCREENS),
    bind(&[ch(' ')], Do::Move(Step::PageDown), DETAILS),
    bind(&[key(PageUp)], Do::Move(Step::PageUp), SCREENS),
    bind(&[key(Home), ch('g')], Do::Move(Step::Top), SCREENS),
    bind(&[key(End), ch('G')], Do::Move(Step::Bottom), SCREENS),
    bind(&[key(Enter)], Do::Open, LISTS)
        .help("Enter", "open the detail, Esc back; operations: its keys")
        .hint(2, "Enter open", LISTS),
    bind(
        &[key(Esc), key(Enter), key(Backspace), ch('h')],
        Do::Back,
        DETAILS,
    )
    .hint(1, "Esc back", DETAILS),
    bind(&[key(Tab)], Do::NextView, SCREENS)
        .help("Tab", "switch view: keys / operations / outbox / inbox")
        .hint(8, "Tab view", LISTS),
    bind(&[key(BackTab)], Do::PreviousView, LISTS),
    bind(&[ch('/')], Do::Search, SCREENS)
        .help("/", "search by key prefix (Enter applies, empty clears)")
        .hint(3, "/ search", &[Keys, Operations]),
    bind(&[ch('s')], Do::CycleStatus, &[Keys, Operations])
        .help(
            "s",
            "cycle status filter: completed processing stuck expired",
        )
        .hint(4, "s status", &[Keys, Operations]),
    bind(&[ch('o')], Do::FilterOperation, &[Keys])
        .help("o / S", "filter by the selected key's operation / scope"),
    bind(&[ch('S')], Do::FilterScope, &[Keys]),
    bind(&[ch('x')], Do::ClearFilters, LISTS).help("x", "clear every filter"),
    bind(DIGITS, Do::Sort, &[Keys]).help(
        "1-7, 0",
        "sort loaded keys by a column (again: reverse), 0: none",
    ),
    bind(&[ch('e')], Do::Expire, ON_KEYS)
        .help(
            "e r c f d",
            "expire release complete fail delete (asks first)\n\
             refused (live lease…)? force on the command line: --force",
        )
        .hint(5, "e/r/c/f/d act", &[Detail]),
    bind(&[ch('r')], Do::Release, ON_KEYS),
    bind(&[ch('c')], Do::Complete, ON_KEYS),
    bind(&[ch('f')], Do::Fail, ON_KEYS),
    bind(&[ch('d')], Do::Delete, ON_KEYS),
    bind(&[ch('r')], Do::Retry, ON_MESSAGES)
        .help(
            "outbox: r A",
            "retry the message / every dead or waiting one (asks first)",
        )
        .hint(6, "r retry", ON_MESSAGES),
    bind(&[ch('A')], Do::RetryAll, ON_MESSAGES).hint(7, "A retry all", &[Outbox]),
    bind(
        &[ch('e'), ch('c'), ch('f'), ch('d')],
        Do::KeysOnly,
        ON_MESSAGES,
    ),
    bind(&[ch('s')], Do::CycleStatus, &[Outbox])
        .help("outbox: s", "cycle status filter: pending delivered dead")
        .hint(4, "s status", &[Outbox]),
    bind(&[ch('s')], Do::CycleStatus, &[Inbox])
        .help(
            "inbox: s",
            "cycle status filter: waiting unmatched (read-only)",
        )
        .hint(4, "s status", &[Inbox]),
    bind(
        &[ch('e'), ch('r'), ch('c'), ch('f'), ch('d')],
        Do::KeysOnly,
        ON_EVENTS,
    ),
    bind(&[ch('p')], Do::Pause, SCREENS).help(
        "p",
        "pause / resume the live refresh (keys 2 s, counts 10 s)",
    ),
    bind(&[ch('R'), key(F(5))], Do::Refresh, SCREENS).help("R, F5", "refresh now"),
    bind(&[ch('?')], Do::Help, SCREENS)
        .help("?", "this help (any key closes it)")
        .hint(9, "? help", SCREENS),
    bind(
        &[ch('q')],
        Do::Quit,
        &[
            Keys, Operations, Outbox, Inbox, Detail, Message, Event, Help,
        ],
    )
    .help("q, Ctrl-C", "quit")
    .hint(10, "q quit", SCREENS),
];

/// What `event` does on `screen`; `None`: nothing bound (in a dialog or the prompt, the
/// key types).
#[must_use]
pub fn action(screen: Screen, event: &KeyEvent) -> Option<Do> {
    BINDINGS
        .iter()
        .find(|b| b.on.contains(&screen) && b.keys.iter().any(|k| k.matches(event)))
        .map(|b| b.action)
}

/// The footer of `screen`: its hints, left to right.
#[must_use]
pub fn footer(screen: Screen) -> String {
    let mut hints: Vec<Hint> = BINDINGS
        .iter()
        .filter_map(|b| b.hint)
        .filter(|h| h.on.contains(&screen))
        .collect();
    hints.sort_by_key(|h| h.order);
    hints.iter().map(|h| h.text).collect::<Vec<_>>().join("  ")
}

/// The help screen's lines, in the table's order: the keys as shown and what they do (a
/// second line of a text without keys).
#[must_use]
pub fn help() -> Vec<(&'static str, &'static str)> {
    BINDINGS
        .iter()
        .filter_map(|b| b.help)
        .flat_map(|(keys, text)| {
            text.lines()
                .enumerate()
                .map(move |(i, line)| (if i == 0 { keys } else { "" }, line))
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_key_does_one_thing_on_a_screen() {
        for &screen in EVERYWHERE {
            let keys: Vec<Key> = BINDINGS
                .iter()
                .filter(|b| b.on.contains(&screen))
                .flat_map(|b| b.keys.iter().copied())
                .collect();
            for (i, key) in keys.iter().enumerate() {
                assert!(
                    !keys[i + 1..].contains(key),
                    "{key:?} is bound twice on {screen:?}"
                );
            }
        }
    }

    #[test]
    fn a_hint_shows_where_its_keys_apply() {
        for binding in BINDINGS {
            if let Some(hint) = binding.hint {
                assert!(
                    hint.on.iter().all(|s| binding.on.contains(s)),
                    "{:?}",
                    hint.text
                );
            }
        }
    }

    #[test]
    fn ctrl_c_is_not_c() {
        let ctrl_c = KeyEvent::new(KeyCode::Char('c'), KeyModifiers::CONTROL);
        let c = KeyEvent::new(KeyCode::Char('c'), KeyModifiers::NONE);
        assert_eq!(action(Keys, &ctrl_c), Some(Do::Quit));
        assert_eq!(action(Dialog, &ctrl_c), Some(Do::Quit));
        assert_eq!(action(Keys, &c), Some(Do::Complete));
        assert_eq!(action(Dialog, &c), None, "it types");
        // Other modifiers do not matter: Shift makes `G`, and Ctrl-e is `e`.
        let shift_g = KeyEvent::new(KeyCode::Char('G'), KeyModifiers::SHIFT);
        assert_eq!(action(Keys, &shift_g), Some(Do::Move(Step::Bottom)));
        let ctrl_e = KeyEvent::new(KeyCode::Char('e'), KeyModifiers::CONTROL);
        assert_eq!(action(Detail, &ctrl_e), Some(Do::Expire));
    }
}
