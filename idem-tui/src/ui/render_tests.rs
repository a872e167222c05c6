//! Full-screen snapshots of [`draw`] with a fixed clock and fixed rows, in
//! `tests/snapshots/`.

use jiff::tz::TimeZone;
use ratatui::Terminal;
use ratatui::backend::TestBackend;
use ratatui::crossterm::event::{KeyCode, KeyEvent, KeyModifiers};

use super::act::KeyId;
use super::app::{App, update};
use super::chrome::draw;
use super::fixtures::{self, loaded_app};
use super::work::Msg;

fn render(app: &App, width: u16, height: u16) -> String {
    let mut terminal = Terminal::new(TestBackend::new(width, height)).unwrap();
    terminal.draw(|frame| draw(app, frame)).unwrap();
    terminal.backend().to_string()
}

macro_rules! snapshot {
    ($name:expr, $screen:expr) => {
        insta::with_settings!({
            snapshot_path => "../../tests/snapshots",
            prepend_module_to_snapshot => false,
            omit_expression => true,
        }, {
            insta::assert_snapshot!($name, $screen);
        })
    };
}

fn press(app: &mut App, code: KeyCode) {
    let _ = update(app, Msg::Key(KeyEvent::new(code, KeyModifiers::NONE)));
}

fn open_detail(app: &mut App, index: usize) {
    for _ in 0..index {
        press(app, KeyCode::Down);
    }
    press(app, KeyCode::Enter);
    let row = app.keys.selected_row().unwrap().clone();
    let _ = update(
        app,
        Msg::DetailLoaded {
            key: KeyId::of(&row),
            result: Ok(Box::new(fixtures::detail_data(&row))),
        },
    );
}

#[test]
fn key_list() {
    let mut app = loaded_app();
    press(&mut app, KeyCode::Down);
    snapshot!("ui_keys_80x24", render(&app, 80, 24));
}

#[test]
fn key_list_wide_sorted_and_filtered() {
    let mut app = loaded_app();
    app.keys.filters.scope = Some("tenant:acme".into());
    app.keys.filters.key_prefix = Some("order-".into());
    app.live.paused = true;
    press(&mut app, KeyCode::Char('5'));
    snapshot!("ui_keys_120x30", render(&app, 120, 30));
}

#[test]
fn detail_with_a_json_body() {
    let mut app = loaded_app();
    open_detail(&mut app, 0);
    snapshot!("ui_detail_json_80x24", render(&app, 80, 24));
    // Scrolled down to the journal and the audit.
    for _ in 0..18 {
        press(&mut app, KeyCode::Char('j'));
    }
    snapshot!("ui_detail_json_scrolled_80x24", render(&app, 80, 24));
}

#[test]
fn detail_of_a_stuck_key_wide() {
    let mut app = loaded_app();
    open_detail(&mut app, 3);
    snapshot!("ui_detail_stuck_120x40", render(&app, 120, 40));
}

#[test]
fn detail_with_a_binary_body() {
    let mut app = loaded_app();
    open_detail(&mut app, 1);
    for _ in 0..14 {
        press(&mut app, KeyCode::Char('j'));
    }
    snapshot!("ui_detail_binary_80x24", render(&app, 80, 24));
}

#[test]
fn operations() {
    let mut app = loaded_app();
    press(&mut app, KeyCode::Tab);
    snapshot!("ui_operations_80x24", render(&app, 80, 24));
}

#[test]
fn confirmation_dialogs() {
    let mut app = loaded_app();
    press(&mut app, KeyCode::Char('e'));
    for c in "INC-42 client retried".chars() {
        press(&mut app, KeyCode::Char(c));
    }
    press(&mut app, KeyCode::Enter);
    snapshot!("ui_dialog_expire_80x24", render(&app, 80, 24));

    let mut app = loaded_app();
    for _ in 0..3 {
        press(&mut app, KeyCode::Down);
    }
    press(&mut app, KeyCode::Char('c'));
    press(&mut app, KeyCode::Enter);
    press(&mut app, KeyCode::Enter);
    for c in r#"{"id":8}"#.chars() {
        press(&mut app, KeyCode::Char(c));
    }
    snapshot!("ui_dialog_complete_80x24", render(&app, 80, 24));
}

#[test]
fn help() {
    let mut app = loaded_app();
    press(&mut app, KeyCode::Char('?'));
    snapshot!("ui_help_80x24", render(&app, 80, 24));
}

#[test]
fn errors_and_the_search_prompt() {
    let mut app = loaded_app();
    app.session.read_only = true;
    press(&mut app, KeyCode::Char('d'));
    snapshot!("ui_read_only_80x24", render(&app, 80, 24));
    press(&mut app, KeyCode::Char('/'));
    for c in "ord".chars() {
        press(&mut app, KeyCode::Char(c));
    }
    snapshot!("ui_search_80x24", render(&app, 80, 24));
}

#[test]
fn a_refusal_says_why_and_how_to_force() {
    let mut app = loaded_app();
    let key = KeyId::of(app.keys.selected_row().unwrap());
    let refused = super::note::ActError::from(idem_store::StoreError::NeedsForce {
        action: "complete",
        hazard: idem_store::Hazard::LeaseLive {
            locked_until_ms: Some(fixtures::NOW + 30_000),
        },
    });
    let _ = update(
        &mut app,
        Msg::Acted {
            key,
            action: "complete",
            result: Err(refused),
        },
    );
    snapshot!("ui_refused_80x24", render(&app, 80, 24));
}

#[test]
fn tiny_terminals_do_not_panic() {
    let mut empty = App::new("db".into(), "alice".into(), false, TimeZone::UTC);
    let _ = update(
        &mut empty,
        Msg::Tick {
            now_ms: fixtures::NOW,
        },
    );
    let _ = update(&mut empty, fixtures::refreshed(Vec::new(), None));
    for (w, h) in [(1, 1), (3, 3), (10, 4), (20, 5), (80, 24)] {
        render(&empty, w, h);
    }
    let mut app = loaded_app();
    for (w, h) in [(1, 1), (10, 3), (20, 5), (40, 10), (80, 24)] {
        render(&app, w, h);
        press(&mut app, KeyCode::Char('?'));
        render(&app, w, h);
        press(&mut app, KeyCode::Esc);
        press(&mut app, KeyCode::Char('e'));
        render(&app, w, h);
        press(&mut app, KeyCode::Esc);
        open_detail(&mut app, 1);
        render(&app, w, h);
        press(&mut app, KeyCode::Esc);
    }
    let mut outbox = fixtures::outbox_app();
    for (w, h) in [(1, 1), (10, 3), (20, 5), (40, 10), (80, 24)] {
        render(&outbox, w, h);
        press(&mut outbox, KeyCode::Char('A'));
        render(&outbox, w, h);
        press(&mut outbox, KeyCode::Esc);
        press(&mut outbox, KeyCode::Enter);
        render(&outbox, w, h);
        press(&mut outbox, KeyCode::Esc);
    }
    let mut inbox = fixtures::inbox_app();
    for (w, h) in [(1, 1), (10, 3), (20, 5), (40, 10), (80, 24)] {
        render(&inbox, w, h);
        press(&mut inbox, KeyCode::Enter);
        render(&inbox, w, h);
        press(&mut inbox, KeyCode::Esc);
    }
}

#[test]
fn the_inbox() {
    let mut app = fixtures::inbox_app();
    press(&mut app, KeyCode::Down);
    let screen = render(&app, 80, 24);
    // Each event's age, status and deliveries, in the order the store lists them.
    let events: Vec<Vec<&str>> = ["evt_old", "evt_orphan", "evt_early"]
        .iter()
        .map(|id| {
            table_line(&screen, id)
                .split(['"', '│', '▸', ' '])
                .filter(|c| !c.is_empty())
                .collect()
        })
        .collect();
    assert_eq!(events[0][2..5], ["unmatched", "1d2h", "1"], "{screen}");
    assert_eq!(events[1][2..5], ["unmatched", "2h", "3"], "{screen}");
    assert_eq!(events[2][2..5], ["waiting", "5m", "1"], "{screen}");
    assert!(
        screen.contains("listed: unmatched 2  waiting 1"),
        "{screen}"
    );
    snapshot!("ui_inbox_80x24", screen);
    // Filtered, nothing to show.
    let mut empty = fixtures::inbox_app();
    press(&mut empty, KeyCode::Char('s'));
    let query = empty.inbox.query();
    let _ = update(
        &mut empty,
        Msg::Refreshed {
            generation: 0,
            result: Ok(Box::new(super::work::Refreshed {
                inbox: Some((query, Ok(Vec::new()))),
                ..refreshed_parts()
            })),
        },
    );
    let screen = render(&empty, 80, 24);
    assert!(
        screen.contains("no waiting events (x clears the filter)"),
        "{screen}"
    );
    snapshot!("ui_inbox_empty_80x24", screen);
}

#[test]
fn an_inbox_event() {
    let mut app = fixtures::inbox_app();
    press(&mut app, KeyCode::Down);
    press(&mut app, KeyCode::Enter);
    let screen = render(&app, 80, 24);
    for expected in [
        "event evt_orphan — Esc back",
        "deliveries     3",
        "no payment names the charge ch_1",
        "body           JSON, 66 bytes",
        "\"charge\": \"ch_1\"",
    ] {
        assert!(screen.contains(expected), "{expected} in {screen}");
    }
    snapshot!("ui_inbox_event_80x24", screen);
}

#[test]
fn the_outbox() {
    let mut app = fixtures::outbox_app();
    press(&mut app, KeyCode::Down);
    snapshot!("ui_outbox_80x24", render(&app, 80, 24));
    snapshot!("ui_outbox_120x30", render(&app, 120, 30));
    // Filtered, nothing to show.
    let mut empty = fixtures::outbox_app();
    press(&mut empty, KeyCode::Char('s'));
    let query = empty.outbox.query();
    let _ = update(
        &mut empty,
        Msg::Refreshed {
            generation: 0,
            result: Ok(Box::new(super::work::Refreshed {
                outbox: Some((query, Ok(Vec::new()))),
                ..refreshed_parts()
            })),
        },
    );
    snapshot!("ui_outbox_empty_80x24", render(&empty, 80, 24));
}

/// The parts of a refresh of [`fixtures::rows`], for a test to change some.
fn refreshed_parts() -> super::work::Refreshed {
    match fixtures::outbox_refreshed(fixtures::messages()) {
        Msg::Refreshed {
            result: Ok(refreshed),
            ..
        } => *refreshed,
        other => panic!("{other:?}"),
    }
}

#[test]
fn a_message_detail() {
    let mut app = fixtures::outbox_app();
    press(&mut app, KeyCode::Enter);
    let row = app.outbox.list.selected_row().unwrap().clone();
    let _ = update(
        &mut app,
        Msg::MessageLoaded {
            id: row.id,
            result: Ok(Box::new(fixtures::message_data(&row))),
        },
    );
    snapshot!("ui_message_dead_80x24", render(&app, 80, 24));
    let mut app = fixtures::outbox_app();
    app.outbox.list.selected = 2;
    press(&mut app, KeyCode::Enter);
    let row = app.outbox.list.selected_row().unwrap().clone();
    let _ = update(
        &mut app,
        Msg::MessageLoaded {
            id: row.id,
            result: Ok(Box::new(super::work::MessageData {
                row: Some(row),
                audit: Ok(Vec::new()),
            })),
        },
    );
    snapshot!("ui_message_in_flight_80x24", render(&app, 80, 24));
}

#[test]
fn retry_dialogs() {
    let mut app = fixtures::outbox_app();
    press(&mut app, KeyCode::Char('r'));
    for c in "INC-51 receiver back".chars() {
        press(&mut app, KeyCode::Char(c));
    }
    press(&mut app, KeyCode::Enter);
    snapshot!("ui_dialog_retry_80x24", render(&app, 80, 24));

    let mut app = fixtures::outbox_app();
    press(&mut app, KeyCode::Down);
    press(&mut app, KeyCode::Char('r'));
    snapshot!("ui_dialog_retry_waiting_80x24", render(&app, 80, 24));

    let mut app = fixtures::outbox_app();
    press(&mut app, KeyCode::Char('A'));
    snapshot!("ui_dialog_retry_all_80x24", render(&app, 80, 24));

    // Not retryable: the status line says why.
    let mut app = fixtures::outbox_app();
    app.outbox.list.selected = 2;
    press(&mut app, KeyCode::Char('r'));
    snapshot!("ui_retry_in_flight_80x24", render(&app, 80, 24));
}

/// The screen's lines.
fn lines(screen: &str) -> Vec<&str> {
    screen.lines().collect()
}

/// The line of the key table that shows `key`.
fn table_line<'a>(screen: &'a str, key: &str) -> &'a str {
    lines(screen)
        .into_iter()
        .find(|l| l.contains(key))
        .unwrap_or_else(|| panic!("{key} in\n{screen}"))
}

/// A processing key (its TTL ran out while its attempt runs) and a stuck one show no expiry
/// in the table and the detail, and sort after every final key by `exp in`: a key that is
/// not final does not expire.
#[test]
fn keys_that_are_not_final_do_not_expire() {
    use fixtures::{HOUR, MIN, NOW};
    let mut rows = fixtures::rows();
    let mut running = fixtures::stuck("tenant:acme", "create_order:v1", "order-5");
    running.status = idem_store::KeyStatus::Processing;
    running.locked_until_ms = Some(NOW + 5 * MIN);
    running.expires_at_ms = NOW - HOUR;
    rows.push(running);
    let mut app = loaded_app();
    let _ = update(&mut app, fixtures::refreshed(rows, None));
    let screen = render(&app, 80, 24);
    for key in ["order-5", "order-2"] {
        let line = table_line(&screen, key);
        assert!(line.contains(" -  "), "{line}");
        assert!(!line.contains("expired") && !line.contains("ago"), "{line}");
    }
    assert!(table_line(&screen, "msg-0001").contains(" 22h "));
    assert!(table_line(&screen, "msg-0002").contains(" expired "));

    // Sorted by `exp in`: expired, then completed by expiry, then the keys that never do.
    press(&mut app, KeyCode::Char('6'));
    let order: Vec<&str> = app.keys.shown_rows().map(|r| r.key.as_str()).collect();
    assert_eq!(order[0], "msg-0002", "{order:?}");
    assert_eq!(
        order[order.len() - 2..]
            .iter()
            .collect::<std::collections::BTreeSet<_>>(),
        [&"order-2", &"order-5"].into_iter().collect(),
        "{order:?}"
    );

    // The detail says why.
    let at = app
        .keys
        .shown_rows()
        .position(|r| r.key == "order-5")
        .unwrap();
    open_detail(&mut app, at);
    let screen = render(&app, 80, 24);
    assert!(
        screen.contains("expires        - (not final: its TTL counts from its completion)"),
        "{screen}"
    );
}

/// A refusal gives times, not milliseconds since the Unix epoch: idem-store's words for an
/// expiry that came between reading and acting.
#[test]
fn a_refusal_gives_times_not_epochs() {
    let mut app = loaded_app();
    let key = KeyId::of(app.keys.selected_row().unwrap());
    let expired_at = fixtures::NOW - 10 * fixtures::MIN;
    let refused = super::note::ActError::from(idem_store::StoreError::NotApplicable(
        idem_store::NotApplicable::ExpiredAlready {
            expired_at_ms: expired_at,
        },
    ));
    let _ = update(
        &mut app,
        Msg::Acted {
            key,
            action: "expire",
            result: Err(refused),
        },
    );
    let screen = render(&app, 80, 24);
    let footer = lines(&screen)[20..].concat();
    assert!(
        footer.contains("already (at 2027-01-15T07:50:00.000Z)"),
        "{screen}"
    );
    assert!(!footer.contains(&expired_at.to_string()), "{screen}");
}

/// A scope (or operation) that fits shows whole, whatever the other names; one too long
/// for the terminal is cut with `…`, and the key keeps its room.
#[test]
fn names_that_fit_show_whole() {
    let key = "9f1c2b7e-3d4a-4c55-8e21-0b6f7a9d3c10";
    let mut rows = fixtures::rows();
    rows.push(fixtures::completed("tenant:globex", "create_order:v1", key));
    let mut app = loaded_app();
    let _ = update(&mut app, fixtures::refreshed(rows.clone(), None));
    let screen = render(&app, 80, 24);
    let line = table_line(&screen, "tenant:globex");
    assert!(
        line.contains("tenant:globex create_order:v1 9f1c2b7e-3d4a-…"),
        "{line}"
    );
    assert!(table_line(&screen, "order-1").contains("tenant:acme   create_order:v1"));
    snapshot!("ui_keys_long_names_80x24", screen);
    // Wider: the key shows whole too.
    let screen = render(&app, 120, 30);
    assert!(
        table_line(&screen, "tenant:globex").contains(&format!("create_order:v1  {key} ")),
        "{screen}"
    );

    // A scope longer than the room: cut, marked, the key keeps its 15 columns.
    rows.push(fixtures::completed(
        "tenant:550e8400-e29b-41d4-a716-446655440000",
        "create_order:v1",
        "order-77",
    ));
    let _ = update(&mut app, fixtures::refreshed(rows, None));
    let screen = render(&app, 80, 24);
    let line = table_line(&screen, "order-77");
    assert!(
        line.contains("tenant:550e84… create_order:… order-77"),
        "{line}"
    );
    assert!(table_line(&screen, "tenant:globex").contains("tenant:globex "));
}

#[test]
fn name_columns_share_the_room_the_key_leaves() {
    use super::views::keys::table::key_columns;
    // 80 columns leave 43 for scope, operation and key.
    // Everything fits: a space after each name, the key the rest.
    assert_eq!(key_columns(43, [13, 15, 7]), [14, 16, 13]);
    // Exactly: no space to spare, the key its 15.
    assert_eq!(key_columns(43, [13, 15, 36]), [13, 15, 15]);
    // A key shorter than 15 leaves the names more.
    assert_eq!(key_columns(43, [20, 15, 8]), [20, 15, 8]);
    // Too long: the narrower whole when it needs no more than half, else both halves.
    assert_eq!(key_columns(43, [43, 10, 36]), [18, 10, 15]);
    assert_eq!(key_columns(43, [10, 43, 36]), [10, 18, 15]);
    assert_eq!(key_columns(43, [43, 15, 36]), [14, 14, 15]);
    // Wide terminals: every name whole.
    assert_eq!(key_columns(150, [43, 15, 36]), [44, 16, 90]);
    // No room at all: nothing, no panic.
    assert_eq!(key_columns(0, [13, 15, 36]), [0, 0, 0]);
    assert_eq!(key_columns(10, [13, 15, 36]), [0, 0, 10]);
}

/// The text of a detail pane's lines, one a line.
fn text_of(lines: &[ratatui::text::Line<'_>]) -> String {
    let line = |line: &ratatui::text::Line<'_>| {
        (line.spans.iter())
            .map(|span| span.content.as_ref())
            .collect::<String>()
    };
    lines.iter().map(line).collect::<Vec<_>>().join("\n")
}

/// A key whose values are sealed under a storage key the tool was not given shows
/// `sealed (key k1)` where its fingerprint, body, journal and request would be; opened, its
/// values and the key.
#[test]
fn sealed_keys_show_their_storage_key() {
    let sealing = |opened| {
        Some(idem_store::Sealing {
            key: "k1".into(),
            opened,
        })
    };
    let mut row = fixtures::stuck("tenant:acme", "pay:v1", "order-9");
    row.status = idem_store::KeyStatus::Completed;
    row.sealed = sealing(false);
    row.fingerprint = b"idem-sealed:v1:k1:0123".to_vec();
    row.response = Some(idem_store::StoredResponse {
        status: 201,
        ..idem_store::StoredResponse::default()
    });
    let mut journal = fixtures::detail_data(&row).journal.unwrap().unwrap();
    (journal.steps, journal.request) = (serde_json::Map::new(), None);
    journal.sealed = sealing(false);
    let shown = |row: &idem_store::KeyRow, journal: idem_store::Journal| {
        let journal = Some(&Ok(Some(journal)));
        let audit = Some(&Ok(Vec::new()));
        text_of(&super::detail::lines(
            Some(row),
            journal,
            audit,
            fixtures::NOW,
            &TimeZone::UTC,
        ))
    };
    let text = shown(&row, journal.clone());
    for line in [
        "fingerprint    sealed (key k1)",
        "sealed         key k1 (not opened: not among the storage keys given)",
        "status         201",
        "body           sealed (key k1)",
        "journal and request sealed (key k1)",
        "Provider keys\nsteps sealed (key k1)",
    ] {
        assert!(text.contains(line), "{line:?} in\n{text}");
    }
    assert!(!text.contains("idem-sealed"), "{text}");

    let opened = fixtures::detail_data(&fixtures::completed("global", "sync:v1", "msg-0001"));
    let mut row = opened.row.unwrap();
    row.sealed = sealing(true);
    journal.sealed = sealing(true);
    let text = shown(&row, journal);
    assert!(text.contains("sealed         key k1 (opened)"), "{text}");
    assert!(text.contains("body           JSON, "), "{text}");
    assert!(!text.contains("sealed (key k1)"), "{text}");
}

/// A staged key's detail lists the provider key sent for each recorded step, as the runtime
/// derives it (to search the provider's dashboard with); none yet, or while the journal
/// loads, is said; an atomic key's detail has no such section.
#[test]
fn a_staged_keys_detail_shows_each_steps_provider_key() {
    let row = fixtures::stuck("tenant:acme", "pay:v1", "order-9");
    let data = fixtures::detail_data(&row);
    let shown = |journal| {
        text_of(&super::detail::lines(
            Some(&row),
            journal,
            Some(&Ok(Vec::new())),
            fixtures::NOW,
            &TimeZone::UTC,
        ))
    };
    let text = shown(Some(&data.journal));
    let sent = |step| idem_runtime::staged::provider_key(row.key_ref(), 7, step);
    let section = format!(
        "\nProvider keys\n  charge: {}\n  reserve: {}\n\nRequest\n",
        sent("charge"),
        sent("reserve")
    );
    assert!(text.contains(&section), "{section:?} in\n{text}");
    assert!(shown(None).contains("\nProvider keys\nloading…\n"));
    let mut journal = data.journal.clone().unwrap().unwrap();
    journal.steps.clear();
    let text = shown(Some(&Ok(Some(journal))));
    assert!(
        text.contains("\nProvider keys\nnone (no step recorded yet)\n"),
        "{text}"
    );

    let atomic = fixtures::completed("global", "sync:v1", "msg-0001");
    let data = fixtures::detail_data(&atomic);
    let text = text_of(&super::detail::lines(
        Some(&atomic),
        Some(&data.journal),
        Some(&data.audit),
        fixtures::NOW,
        &TimeZone::UTC,
    ));
    assert!(!text.contains("Provider keys"), "{text}");
}

/// A key's detail shows what is stored as stored: the response body's members in their
/// order, the stored request laid out under a heading like the others (never cut mid-word),
/// and the status column only when it says otherwise.
#[test]
fn the_detail_shows_what_is_stored() {
    let mut row = fixtures::stuck("tenant:acme", "pay:v1", "order-9");
    row.status = idem_store::KeyStatus::Completed;
    row.response = Some(idem_store::StoredResponse {
        status: 200,
        headers: Vec::new(),
        body: bytes::Bytes::from_static(br#"{"zeta":1,"alpha":2}"#),
    });
    let mut journal = fixtures::detail_data(&row).journal.unwrap().unwrap();
    journal.request = Some(serde_json::json!({
        "method": "POST",
        "path": "/payments/with/a/long/path/that/does/not/fit/on/one/line",
    }));
    let journal = Some(&Ok(Some(journal)));
    let audit = Some(&Ok(Vec::new()));
    let lines = super::detail::lines(Some(&row), journal, audit, fixtures::NOW, &TimeZone::UTC);
    let text = text_of(&lines);
    assert!(text.contains("status         completed\n"), "{text}");
    assert!(!text.contains("(column:"), "{text}");
    let (zeta, alpha) = (
        text.find("\"zeta\"").unwrap(),
        text.find("\"alpha\"").unwrap(),
    );
    assert!(zeta < alpha, "{text}");
    assert!(text.contains("\n  \"method\": \"POST\",\n"), "{text}");
    let heading = |name: &str| {
        lines
            .iter()
            .find(|l| l.to_string() == name)
            .unwrap_or_else(|| panic!("{name} in\n{text}"))
            .spans[0]
            .style
    };
    assert_eq!(heading("Request"), heading("Journal"));
    // A stuck key's column says otherwise: shown.
    let stuck = fixtures::stuck("tenant:acme", "pay:v1", "order-9");
    let text = text_of(&super::detail::lines(
        Some(&stuck),
        None,
        None,
        fixtures::NOW,
        &TimeZone::UTC,
    ));
    assert!(
        text.contains("status         stuck (column: processing)"),
        "{text}"
    );
}

/// The inbox's detail speaks of events, whatever they are: no provider's words.
#[test]
fn the_inbox_detail_is_generic() {
    let mut app = fixtures::inbox_app();
    press(&mut app, KeyCode::Down);
    press(&mut app, KeyCode::Enter);
    let screen = render(&app, 80, 24);
    assert!(
        screen.contains("read-only: settle it with its sender, or by hand"),
        "{screen}"
    );
    assert!(!screen.contains("refund"), "{screen}");
}

/// Counts agree with their noun: `1 key loaded`, `2 keys loaded`.
#[test]
fn one_key_is_one_key() {
    let mut app = loaded_app();
    let _ = update(
        &mut app,
        fixtures::refreshed(fixtures::rows()[..1].to_vec(), None),
    );
    let screen = render(&app, 80, 24);
    assert!(screen.contains(" 1 key loaded "), "{screen}");
}

/// The inbox's reason column takes the room the other columns do not need, and every cut
/// is marked with `…`.
#[test]
fn inbox_reasons_get_the_room() {
    let mut app = fixtures::inbox_app();
    let screen = render(&app, 80, 24);
    let line = table_line(&screen, "evt_orphan");
    assert!(line.contains("no payment names the charge ch_1"), "{line}");
    assert!(line.contains("provider_…"), "{line}");
    app.inbox.list.rows[0].reason =
        "the charge names no payment this receiver knows of, ".repeat(3);
    let screen = render(&app, 80, 24);
    let line = table_line(&screen, "evt_old");
    assert!(
        line.contains("the charge names no payment this…│"),
        "{line}"
    );
}

/// The message pane shows the message as `idem outbox show` does: the same fields, the same
/// values, `-` where it has none.
#[test]
fn the_message_pane_is_the_outbox_show_detail() {
    use crate::message;
    for row in fixtures::messages() {
        let when = |ms: i64| super::format::when(ms, fixtures::NOW, &TimeZone::UTC);
        let text = text_of(&super::detail::message_lines(
            Some(&row),
            Some(&Ok(Vec::new())),
            fixtures::NOW,
            &TimeZone::UTC,
        ));
        for (name, value) in message::fields(&row, fixtures::NOW, when) {
            let line = format!("{name:<15}{value}");
            assert!(text.contains(&line), "{line:?} in\n{text}");
        }
        assert!(
            text.contains(&format!("Last error\n{}", message::last_error(&row))),
            "{text}"
        );
        if row.delivered_at_ms.is_none() {
            assert!(
                text.contains(&format!("delivered      {}\n", message::NONE)),
                "{text}"
            );
        }
    }
}
