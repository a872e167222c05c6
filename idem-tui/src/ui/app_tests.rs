//! [`update`]'s transitions.

use idem_store::{
    Action, Cursor, Hazard, InboxStatus, KeyFilter, KeyRef, KeyStatus, NotApplicable, OutboxRow,
    OutboxStatus, Page, StoreError,
};
use ratatui::crossterm::event::{KeyCode, KeyEvent, KeyModifiers};

use super::*;
use crate::ui::act::ActKind;
use crate::ui::dialog::{Field, Target};
use crate::ui::fixtures::{self, NOW, loaded_app, refreshed, rows};
use crate::ui::note::Refusal;
use crate::ui::views::inbox::EVENTS;
use crate::ui::views::keys::{Column, PAGE};
use crate::ui::views::outbox::MESSAGES;
use crate::ui::work::{InboxQuery, OutboxQuery};

fn key(code: KeyCode) -> Msg {
    Msg::Key(KeyEvent::new(code, KeyModifiers::NONE))
}

fn ch(c: char) -> Msg {
    key(KeyCode::Char(c))
}

fn typed(app: &mut App, text: &str) {
    for c in text.chars() {
        assert_eq!(update(app, ch(c)), None, "typing {c:?}");
    }
}

fn refresh_filter(command: Option<Command>) -> KeyFilter {
    match command {
        Some(Command::Refresh { filter, .. }) => filter,
        other => panic!("expected a refresh, got {other:?}"),
    }
}

fn counts(command: Option<Command>) -> bool {
    match command {
        Some(Command::Refresh { count, .. }) => count,
        other => panic!("expected a refresh, got {other:?}"),
    }
}

/// A refresh result with keys and no counts, as a refresh that did not count reads.
fn uncounted() -> Msg {
    let mut msg = refreshed(rows(), None);
    if let Msg::Refreshed {
        result: Ok(refreshed),
        ..
    } = &mut msg
    {
        refreshed.counts = None;
        refreshed.operations = None;
    }
    msg
}

/// The first screen shows keys without waiting for the counts (one pass over the table);
/// the counts follow at once, then every COUNT_EVERY_MS, and after an action.
#[test]
fn the_keys_come_first_and_the_counts_less_often() {
    let mut app = App::new("db".into(), "alice".into(), false, TimeZone::UTC);
    assert!(!counts(update(&mut app, Msg::Tick { now_ms: NOW })));
    // The keys are on screen; counting follows.
    assert!(counts(update(&mut app, uncounted())));
    assert_eq!(app.keys.order.len(), 6);
    assert!(app.keys.counts.is_none());
    assert_eq!(update(&mut app, refreshed(rows(), None)), None);
    assert!(app.keys.counts.is_some());
    // Every refresh re-reads the keys; only every COUNT_EVERY_MS the counts.
    let mut now = NOW;
    while now + REFRESH_EVERY_MS < NOW + COUNT_EVERY_MS {
        now += REFRESH_EVERY_MS;
        assert!(
            !counts(update(&mut app, Msg::Tick { now_ms: now })),
            "at {now}"
        );
        assert_eq!(update(&mut app, uncounted()), None);
    }
    now += REFRESH_EVERY_MS;
    assert!(counts(update(&mut app, Msg::Tick { now_ms: now })));
    assert_eq!(update(&mut app, refreshed(rows(), None)), None);
    // An action makes them stale.
    assert!(counts(update(
        &mut app,
        Msg::Acted {
            key: KeyId::of(&rows()[0]),
            action: "expire",
            result: Ok(7),
        }
    )));
}

#[test]
fn the_clock_drives_the_refresh_unless_paused() {
    let mut app = App::new("db".into(), "alice".into(), false, TimeZone::UTC);
    let first = update(&mut app, Msg::Tick { now_ms: NOW });
    assert_eq!(refresh_filter(first).limit, PAGE);
    assert!(app.live.refreshing);
    // Nothing new while the first is under way, nor before the interval.
    assert_eq!(update(&mut app, Msg::Tick { now_ms: NOW + 100 }), None);
    assert_eq!(update(&mut app, refreshed(rows(), None)), None);
    assert_eq!(app.live.refreshed_at_ms, Some(NOW + 100));
    assert_eq!(app.keys.order.len(), 6);
    assert_eq!(
        update(
            &mut app,
            Msg::Tick {
                now_ms: NOW + 1_000
            }
        ),
        None
    );
    assert!(
        update(
            &mut app,
            Msg::Tick {
                now_ms: NOW + REFRESH_EVERY_MS
            }
        )
        .is_some()
    );
    let _ = update(&mut app, refreshed(rows(), None));
    // Paused: no refresh however late.
    assert_eq!(update(&mut app, ch('p')), None);
    assert!(app.live.paused);
    assert_eq!(
        update(
            &mut app,
            Msg::Tick {
                now_ms: NOW + 60_000
            }
        ),
        None
    );
    // Resumed: at once.
    assert!(update(&mut app, ch('p')).is_some());
    assert!(!app.live.paused);
}

#[test]
fn a_failed_refresh_goes_to_the_status_line() {
    let mut app = loaded_app();
    let _ = update(
        &mut app,
        Msg::Tick {
            now_ms: NOW + REFRESH_EVERY_MS,
        },
    );
    let _ = update(
        &mut app,
        Msg::Refreshed {
            generation: 0,
            result: Err(StoreError::InvalidArgument("connection refused".into()).into()),
        },
    );
    let status = app.status.clone().unwrap();
    assert!(status.is_error());
    assert_eq!(
        status.text(),
        "refresh failed: invalid argument: connection refused"
    );
    // The keys already shown stay.
    assert_eq!(app.keys.order.len(), 6);
    assert!(!app.live.refreshing);
}

#[test]
fn navigation_stays_within_the_rows() {
    let mut app = loaded_app();
    assert_eq!(app.keys.selected, 0);
    let _ = update(&mut app, key(KeyCode::Up));
    assert_eq!(app.keys.selected, 0);
    let _ = update(&mut app, ch('j'));
    let _ = update(&mut app, key(KeyCode::Down));
    assert_eq!(app.keys.selected, 2);
    let _ = update(&mut app, ch('k'));
    assert_eq!(app.keys.selected, 1);
    let _ = update(&mut app, ch('G'));
    assert_eq!(app.keys.selected, 5);
    let _ = update(&mut app, key(KeyCode::PageDown));
    assert_eq!(app.keys.selected, 5);
    let _ = update(&mut app, ch('g'));
    assert_eq!(app.keys.selected, 0);
    assert_eq!(app.keys.selected_row().unwrap().key, "msg-0001");
}

#[test]
fn pages_load_as_the_selection_nears_the_end() {
    let mut app = App::new("db".into(), "alice".into(), false, TimeZone::UTC);
    let _ = update(&mut app, Msg::Tick { now_ms: NOW });
    let first: Vec<_> = rows().into_iter().take(3).collect();
    let next = Cursor::at(first[2].key_ref());
    // Three rows and a next page: the selection is near the end already.
    let more = update(&mut app, refreshed(first, Some(next.clone())));
    match more {
        Some(Command::LoadMore { generation, filter }) => {
            assert_eq!(generation, 0);
            assert_eq!(filter.after, Some(next));
            assert_eq!(filter.limit, PAGE);
        }
        other => panic!("{other:?}"),
    }
    assert!(app.keys.loading_more);
    // Once under way, moving does not ask again.
    assert_eq!(update(&mut app, ch('j')), None);
    let rest: Vec<_> = rows().into_iter().skip(3).collect();
    let _ = update(
        &mut app,
        Msg::MoreLoaded {
            generation: 0,
            result: Ok(Page {
                keys: rest,
                next: None,
            }),
        },
    );
    assert_eq!(app.keys.order.len(), 6);
    assert!(!app.keys.loading_more);
    assert_eq!(app.keys.next, None);
    // The next refresh reads as many keys as are loaded (at least a page).
    let _ = update(
        &mut app,
        Msg::Tick {
            now_ms: NOW + REFRESH_EVERY_MS,
        },
    );
    assert_eq!(app.keys.selected, 1);
    // A page of an older listing is dropped.
    let _ = update(&mut app, ch('s'));
    let stale = Msg::MoreLoaded {
        generation: 0,
        result: Ok(Page {
            keys: rows(),
            next: None,
        }),
    };
    assert_eq!(update(&mut app, stale), None);
    assert!(app.keys.rows.is_empty());
}

#[test]
fn the_status_filter_cycles_and_relists() {
    let mut app = loaded_app();
    let mut seen = Vec::new();
    for _ in 0..5 {
        let filter = refresh_filter(update(&mut app, ch('s')));
        assert_eq!(filter.status, app.keys.filters.status);
        assert_eq!(filter.after, None);
        seen.push(filter.status);
    }
    assert_eq!(
        seen,
        [
            Some(KeyStatus::Completed),
            Some(KeyStatus::Processing),
            Some(KeyStatus::Stuck),
            Some(KeyStatus::Expired),
            None
        ]
    );
    assert_eq!(app.keys.generation, 5);
    assert!(app.keys.rows.is_empty(), "a new listing starts empty");
    // A refresh of an older listing is dropped.
    assert_eq!(update(&mut app, refreshed(rows(), None)), None);
    assert!(app.keys.rows.is_empty());
}

#[test]
fn search_by_prefix() {
    let mut app = loaded_app();
    assert_eq!(update(&mut app, ch('/')), None);
    assert!(app.keys.prompt.is_some());
    // Typing in the prompt: `q` and `s` are text here.
    typed(&mut app, "orqs");
    let _ = update(&mut app, key(KeyCode::Backspace));
    let _ = update(&mut app, key(KeyCode::Backspace));
    typed(&mut app, "der-");
    assert_eq!(app.keys.prompt.as_ref().unwrap().text, "order-");
    assert!(!app.quit);
    let filter = refresh_filter(update(&mut app, key(KeyCode::Enter)));
    assert_eq!(filter.key_prefix.as_deref(), Some("order-"));
    assert!(app.keys.prompt.is_none());
    // Esc leaves the filter as it was.
    let _ = update(&mut app, ch('/'));
    typed(&mut app, "x");
    assert_eq!(update(&mut app, key(KeyCode::Esc)), None);
    assert_eq!(app.keys.filters.key_prefix.as_deref(), Some("order-"));
    // An empty prefix clears it.
    let _ = update(&mut app, ch('/'));
    for _ in 0..6 {
        let _ = update(&mut app, key(KeyCode::Backspace));
    }
    let filter = refresh_filter(update(&mut app, key(KeyCode::Enter)));
    assert_eq!(filter.key_prefix, None);
}

#[test]
fn scope_and_operation_filters_from_the_selection() {
    let mut app = loaded_app();
    let _ = update(&mut app, ch('j'));
    let _ = update(&mut app, ch('j'));
    let filter = refresh_filter(update(&mut app, ch('o')));
    assert_eq!(filter.operation.as_deref(), Some("create_order:v1"));
    let mut msg = refreshed(rows(), None);
    if let Msg::Refreshed { generation, .. } = &mut msg {
        *generation = app.keys.generation;
    }
    let _ = update(&mut app, msg);
    let filter = refresh_filter(update(&mut app, ch('S')));
    assert_eq!(filter.scope.as_deref(), Some("global"));
    assert_eq!(filter.operation.as_deref(), Some("create_order:v1"));
    let filter = refresh_filter(update(&mut app, ch('x')));
    assert_eq!(filter, KeyFilter::new().limit(PAGE));
}

#[test]
fn sorting_the_loaded_rows_keeps_the_selection() {
    let mut app = loaded_app();
    let _ = update(&mut app, ch('j'));
    assert_eq!(app.keys.selected_row().unwrap().key, "msg-0002");
    assert_eq!(update(&mut app, ch('4')), None, "sorting reads nothing");
    assert_eq!(app.keys.sort, Some((Column::Status, false)));
    let statuses: Vec<_> = app.keys.shown_rows().map(|r| r.status.as_str()).collect();
    assert_eq!(
        statuses,
        [
            "completed",
            "completed",
            "completed",
            "completed",
            "expired",
            "stuck"
        ]
    );
    assert_eq!(app.keys.selected_row().unwrap().key, "msg-0002");
    let _ = update(&mut app, ch('4'));
    assert_eq!(app.keys.sort, Some((Column::Status, true)));
    assert_eq!(
        app.keys.shown_rows().next().unwrap().status,
        KeyStatus::Stuck
    );
    let _ = update(&mut app, ch('0'));
    assert_eq!(app.keys.sort, None);
    assert_eq!(app.keys.shown_rows().next().unwrap().key, "msg-0001");
    assert_eq!(app.keys.selected_row().unwrap().key, "msg-0002");
}

#[test]
fn views_detail_and_help() {
    let mut app = loaded_app();
    let _ = update(&mut app, key(KeyCode::Tab));
    assert_eq!(app.view, View::Operations);
    assert_eq!(app.operations.lines.len(), 4);
    let _ = update(&mut app, ch('j'));
    // Enter on an operation lists its keys.
    let filter = refresh_filter(update(&mut app, key(KeyCode::Enter)));
    assert_eq!(filter.operation.as_deref(), Some("refund:v2"));
    assert_eq!(app.view, View::Keys);
    let mut app = loaded_app();
    let _ = update(&mut app, ch('j'));
    let _ = update(&mut app, ch('j'));
    let _ = update(&mut app, ch('j'));
    let stuck = app.keys.selected_row().unwrap().clone();
    let id = KeyId::of(&stuck);
    assert_eq!(
        update(&mut app, key(KeyCode::Enter)),
        Some(Command::LoadDetail { key: id.clone() })
    );
    let detail = app.keys.detail.as_ref().unwrap();
    assert!(detail.loading);
    assert_eq!(
        detail.row.as_ref(),
        Some(&stuck),
        "the listed row shows at once"
    );
    let _ = update(
        &mut app,
        Msg::DetailLoaded {
            key: id.clone(),
            result: Ok(Box::new(fixtures::detail_data(&stuck))),
        },
    );
    let detail = app.keys.detail.as_ref().unwrap();
    assert!(!detail.loading);
    assert_eq!(detail.audit.as_ref().unwrap().as_ref().unwrap().len(), 1);
    // A refresh reads the open detail too.
    match update(
        &mut app,
        Msg::Tick {
            now_ms: NOW + REFRESH_EVERY_MS,
        },
    ) {
        Some(Command::Refresh { detail, .. }) => assert_eq!(detail, Some(id)),
        other => panic!("{other:?}"),
    }
    let _ = update(&mut app, ch('j'));
    assert_eq!(app.keys.detail.as_ref().unwrap().scroll, 1);
    let _ = update(&mut app, ch('?'));
    assert!(app.help);
    let _ = update(&mut app, ch('j'));
    assert!(!app.help, "any key closes the help");
    assert_eq!(
        app.keys.detail.as_ref().unwrap().scroll,
        1,
        "and does nothing else"
    );
    let _ = update(&mut app, key(KeyCode::Esc));
    assert!(app.keys.detail.is_none());
    let _ = update(&mut app, ch('q'));
    assert!(app.quit);
}

#[test]
fn ctrl_c_quits_even_in_a_dialog() {
    let mut app = loaded_app();
    let _ = update(&mut app, ch('e'));
    assert!(app.dialog.is_some());
    let _ = update(
        &mut app,
        Msg::Key(KeyEvent::new(KeyCode::Char('c'), KeyModifiers::CONTROL)),
    );
    assert!(app.quit);
}

#[test]
fn expire_asks_for_a_reason_then_confirmation() {
    let mut app = loaded_app();
    let shown = app.keys.selected_row().unwrap().clone();
    assert_eq!(update(&mut app, ch('e')), None);
    let dialog = app.dialog.as_ref().unwrap();
    assert_eq!(dialog.kind, ActKind::Expire);
    assert_eq!(dialog.focus, Field::Reason);
    // `y` and `n` are text while typing the reason.
    typed(&mut app, "yes, INC-7 no");
    assert_eq!(app.dialog.as_ref().unwrap().reason, "yes, INC-7 no");
    assert_eq!(update(&mut app, key(KeyCode::Enter)), None);
    assert_eq!(app.dialog.as_ref().unwrap().focus, Field::Confirm);
    let command = update(&mut app, ch('y'));
    assert_eq!(
        command,
        Some(Command::Act {
            key: KeyId::of(&shown),
            expected: Box::new(shown),
            action: Action::Expire,
            reason: "yes, INC-7 no".into(),
        })
    );
    assert!(app.dialog.is_none());
    assert!(app.acting);
}

#[test]
fn a_dialog_cancels_with_n_or_esc_and_needs_a_reason() {
    let mut app = loaded_app();
    let _ = update(&mut app, ch('d'));
    let _ = update(&mut app, key(KeyCode::Tab));
    // No reason: refused, back to the reason.
    assert_eq!(update(&mut app, ch('y')), None);
    let dialog = app.dialog.as_ref().unwrap();
    assert!(
        dialog
            .error
            .as_ref()
            .unwrap()
            .to_string()
            .contains("reason is required")
    );
    assert_eq!(dialog.focus, Field::Reason);
    let _ = update(&mut app, key(KeyCode::Tab));
    assert_eq!(update(&mut app, ch('n')), None);
    assert!(app.dialog.is_none());
    assert_eq!(
        app.status.as_ref().unwrap().text(),
        "cancelled: nothing was changed"
    );
    let _ = update(&mut app, ch('d'));
    typed(&mut app, "abc");
    assert_eq!(update(&mut app, key(KeyCode::Esc)), None);
    assert!(app.dialog.is_none());
}

#[test]
fn complete_and_fail_ask_for_a_response() {
    let mut app = loaded_app();
    for _ in 0..3 {
        let _ = update(&mut app, ch('j'));
    }
    assert_eq!(app.keys.selected_row().unwrap().status, KeyStatus::Stuck);
    let _ = update(&mut app, ch('f'));
    assert_eq!(app.dialog.as_ref().unwrap().status, "500");
    typed(&mut app, "card declined");
    let _ = update(&mut app, key(KeyCode::Enter));
    assert_eq!(app.dialog.as_ref().unwrap().focus, Field::Status);
    for _ in 0..3 {
        let _ = update(&mut app, key(KeyCode::Backspace));
    }
    typed(&mut app, "200");
    let _ = update(&mut app, key(KeyCode::Enter));
    typed(&mut app, r#"{"error":"declined"}"#);
    let _ = update(&mut app, key(KeyCode::Enter));
    assert_eq!(update(&mut app, ch('y')), None, "a failure is 400 or more");
    let dialog = app.dialog.as_ref().unwrap();
    assert_eq!(
        dialog.error.as_ref().map(ToString::to_string).as_deref(),
        Some("status must be within 400..=599")
    );
    assert_eq!(dialog.focus, Field::Status);
    for _ in 0..3 {
        let _ = update(&mut app, key(KeyCode::Backspace));
    }
    typed(&mut app, "402");
    let _ = update(&mut app, key(KeyCode::Enter));
    let _ = update(&mut app, key(KeyCode::Enter));
    match update(&mut app, ch('y')) {
        Some(Command::Act {
            action: Action::Fail(response),
            reason,
            ..
        }) => {
            assert_eq!(response.status, 402);
            assert_eq!(response.body.as_ref(), br#"{"error":"declined"}"#);
            assert_eq!(
                response.headers,
                [("content-type".to_owned(), "application/json".to_owned())]
            );
            assert_eq!(reason, "card declined");
        }
        other => panic!("{other:?}"),
    }
}

#[test]
fn actions_that_do_not_apply_are_refused_before_the_dialog() {
    let mut app = loaded_app();
    // A completed key cannot be released, completed or failed.
    for c in ['r', 'c', 'f'] {
        assert_eq!(update(&mut app, ch(c)), None);
        assert!(app.dialog.is_none());
        let status = app.status.as_ref().unwrap();
        assert!(status.is_error());
        assert!(
            status.text().contains("does not apply to a completed key"),
            "{}",
            status.text()
        );
    }
    // An expired key cannot be expired.
    let _ = update(&mut app, ch('j'));
    let _ = update(&mut app, ch('e'));
    assert!(app.dialog.is_none());
    // Nothing selected.
    let mut empty = App::new("db".into(), "alice".into(), false, TimeZone::UTC);
    let _ = update(&mut empty, ch('d'));
    assert_eq!(empty.status.unwrap().text(), "delete: no key selected");
}

#[test]
fn read_only_refuses_every_action() {
    let mut app = loaded_app();
    app.session.read_only = true;
    for c in ['e', 'r', 'c', 'f', 'd'] {
        assert_eq!(update(&mut app, ch(c)), None);
        assert!(app.dialog.is_none());
        let status = app.status.as_ref().unwrap();
        assert!(status.is_error());
        assert!(status.text().starts_with("read-only:"), "{}", status.text());
    }
}

#[test]
fn a_changed_row_is_refused_and_shown_as_it_is_now() {
    let mut app = loaded_app();
    for _ in 0..3 {
        let _ = update(&mut app, ch('j'));
    }
    let shown = app.keys.selected_row().unwrap().clone();
    let id = KeyId::of(&shown);
    let _ = update(&mut app, key(KeyCode::Enter));
    let mut now = shown.clone();
    now.attempt = 3;
    now.status = KeyStatus::Processing;
    now.locked_until_ms = Some(NOW + 60_000);
    let command = update(
        &mut app,
        Msg::Acted {
            key: id.clone(),
            action: "release",
            result: Err(ActError::Changed(Some(Box::new(now.clone())))),
        },
    );
    assert!(matches!(command, Some(Command::Refresh { .. })));
    let status = app.status.clone().unwrap();
    assert!(status.is_error());
    assert_eq!(
        status.text(),
        "release refused: tenant:acme create_order:v1 order-2 changed since it was shown \
         (it is processing now, attempt 3); nothing was changed: look at it again"
    );
    assert_eq!(app.keys.selected_row(), Some(&now));
    assert_eq!(app.keys.detail.as_ref().unwrap().row.as_ref(), Some(&now));
    // Deleted meanwhile.
    let _ = update(
        &mut app,
        Msg::Acted {
            key: id,
            action: "expire",
            result: Err(ActError::Changed(None)),
        },
    );
    assert!(
        app.status
            .as_ref()
            .unwrap()
            .text()
            .contains("it is gone now")
    );
    assert_eq!(app.keys.order.len(), 5);
    assert_eq!(app.keys.detail.as_ref().unwrap().row, None);
}

#[test]
fn a_done_action_is_reported_and_refreshes() {
    let mut app = loaded_app();
    let id = KeyId::of(app.keys.selected_row().unwrap());
    let command = update(
        &mut app,
        Msg::Acted {
            key: id,
            action: "expire",
            result: Ok(12),
        },
    );
    assert!(matches!(command, Some(Command::Refresh { .. })));
    let status = app.status.clone().unwrap();
    assert!(!status.is_error());
    assert_eq!(
        status.text(),
        "expire: global sync:v1 msg-0001 done (audit #12)"
    );
    let _ = update(
        &mut app,
        Msg::Acted {
            key: KeyId::of(&rows()[0]),
            action: "delete",
            result: Err(ActError::Failed(StoreError::Corrupt("boom".into()).into())),
        },
    );
    assert!(app.status.as_ref().unwrap().is_error());
}

#[test]
fn a_refused_action_says_why() {
    let mut app = loaded_app();
    let id = KeyId::of(app.keys.selected_row().unwrap());
    let command = update(
        &mut app,
        Msg::Acted {
            key: id,
            action: "delete",
            result: Err(ActError::Refused(Refusal::NeedsForce {
                action: "delete",
                hazard: Hazard::EffectsExist {
                    attempt: 1,
                    recovery_point: None,
                },
            })),
        },
    );
    assert!(matches!(command, Some(Command::Refresh { .. })));
    let status = app.status.clone().unwrap();
    assert!(status.is_error());
    assert_eq!(
        status.text(),
        "global sync:v1 msg-0001: refused: delete: the key completed in staged mode \
         (attempt 1): its steps' effects exist, and a new execution of the key would run them \
         again; retries replay its response, a client that needs a new execution sends a new \
         key; or force it (fenced, audited) on the command line: idem keys delete … --force"
    );
}

#[test]
fn key_ids_borrow_as_key_refs() {
    let row = rows().remove(2);
    let id = KeyId::of(&row);
    assert_eq!(id.as_ref(), row.key_ref());
    assert_eq!(
        id.as_ref(),
        KeyRef {
            scope: "tenant:acme",
            operation: "create_order:v1",
            key: "order-1"
        }
    );
}

#[test]
fn the_detail_scrolls_within_its_lines() {
    let mut app = loaded_app();
    let _ = update(&mut app, key(KeyCode::Enter));
    let row = app.keys.selected_row().unwrap().clone();
    let _ = update(
        &mut app,
        Msg::DetailLoaded {
            key: KeyId::of(&row),
            result: Ok(Box::new(fixtures::detail_data(&row))),
        },
    );
    let lines = app
        .keys
        .detail
        .as_ref()
        .unwrap()
        .lines(app.now_ms, &app.session.tz)
        .len();
    let _ = update(&mut app, ch('G'));
    let last = u16::try_from(lines - 1).unwrap();
    assert_eq!(app.keys.detail.as_ref().unwrap().scroll, last);
    let _ = update(&mut app, ch('j'));
    let _ = update(&mut app, key(KeyCode::PageDown));
    assert_eq!(app.keys.detail.as_ref().unwrap().scroll, last);
    let _ = update(&mut app, ch('k'));
    assert_eq!(app.keys.detail.as_ref().unwrap().scroll, last - 1);
    let _ = update(&mut app, ch('g'));
    assert_eq!(app.keys.detail.as_ref().unwrap().scroll, 0);
}

/// Tab goes round the four views, BackTab the other way; entering the outbox or the inbox
/// reads it.
#[test]
fn tab_goes_round_the_views_and_reads_the_outbox_and_the_inbox() {
    let mut app = loaded_app();
    assert_eq!(update(&mut app, key(KeyCode::Tab)), None);
    assert_eq!(app.view, View::Operations);
    match update(&mut app, key(KeyCode::Tab)) {
        Some(Command::Refresh {
            outbox,
            message,
            inbox,
            ..
        }) => {
            assert_eq!(
                outbox,
                Some(OutboxQuery {
                    status: None,
                    limit: MESSAGES
                })
            );
            assert_eq!((message, inbox), (None, None));
        }
        other => panic!("expected a refresh of the outbox, got {other:?}"),
    }
    assert_eq!(app.view, View::Outbox);
    match update(&mut app, key(KeyCode::Tab)) {
        Some(Command::Refresh {
            outbox,
            inbox,
            event,
            ..
        }) => {
            assert_eq!(
                inbox,
                Some(InboxQuery {
                    status: None,
                    limit: EVENTS
                })
            );
            assert_eq!((outbox, event), (None, None));
        }
        other => panic!("expected a refresh of the inbox, got {other:?}"),
    }
    assert_eq!(app.view, View::Inbox);
    assert_eq!(app.page(), Screen::Inbox);
    assert_eq!(update(&mut app, key(KeyCode::Tab)), None);
    assert_eq!(app.view, View::Keys);
    assert!(update(&mut app, key(KeyCode::BackTab)).is_some());
    assert_eq!(app.view, View::Inbox);
    assert!(update(&mut app, key(KeyCode::BackTab)).is_some());
    assert_eq!(app.view, View::Outbox);
    assert_eq!(update(&mut app, key(KeyCode::BackTab)), None);
    assert_eq!(app.view, View::Operations);
    // Outside the outbox and inbox views, refreshes leave them alone.
    let _ = update(&mut app, key(KeyCode::BackTab));
    match update(&mut app, ch('R')) {
        Some(Command::Refresh { outbox, inbox, .. }) => assert_eq!((outbox, inbox), (None, None)),
        other => panic!("{other:?}"),
    }
}

/// [`fixtures::inbox_refreshed`] with the event detail's read of `event_id`: `events`.
fn event_refreshed(event_id: &str, events: Vec<InboxEvent>) -> Msg {
    let mut msg = fixtures::inbox_refreshed(fixtures::events());
    if let Msg::Refreshed {
        result: Ok(refreshed),
        ..
    } = &mut msg
    {
        refreshed.event = Some((event_id.to_owned(), Ok(events)));
    }
    msg
}

#[test]
fn the_inbox_view_lists_filters_and_opens_events() {
    let mut app = fixtures::inbox_app();
    assert!(app.inbox.list.loaded);
    assert_eq!(app.inbox.list.rows, fixtures::events());
    // Moving stays within the events.
    let _ = update(&mut app, ch('G'));
    assert_eq!(app.inbox.list.selected, 2);
    let _ = update(&mut app, ch('j'));
    assert_eq!(app.inbox.list.selected, 2);
    let _ = update(&mut app, ch('g'));
    let _ = update(&mut app, ch('j'));
    assert_eq!(
        app.inbox.list.selected_row().unwrap().event_id,
        "evt_orphan"
    );
    // A refresh keeps the selected event, wherever it moved.
    let mut reordered = fixtures::events();
    reordered.rotate_left(1);
    let _ = update(&mut app, fixtures::inbox_refreshed(reordered));
    assert_eq!(app.inbox.list.selected, 0);
    assert_eq!(
        app.inbox.list.selected_row().unwrap().event_id,
        "evt_orphan"
    );

    // `s` cycles the status filter: a new listing, the old one's results dropped.
    let query = |command: Option<Command>| match command {
        Some(Command::Refresh { inbox, .. }) => inbox.unwrap().status,
        other => panic!("{other:?}"),
    };
    assert_eq!(query(update(&mut app, ch('s'))), Some(InboxStatus::Waiting));
    assert!(!app.inbox.list.loaded && app.inbox.list.rows.is_empty());
    let _ = update(&mut app, fixtures::inbox_refreshed(fixtures::events()));
    assert!(
        !app.inbox.list.loaded,
        "a listing of every status is not this one"
    );
    assert_eq!(
        query(update(&mut app, ch('s'))),
        Some(InboxStatus::Unmatched)
    );
    assert_eq!(query(update(&mut app, ch('s'))), None);
    assert_eq!(query(update(&mut app, ch('s'))), Some(InboxStatus::Waiting));
    assert_eq!(query(update(&mut app, ch('x'))), None);
    assert_eq!(app.inbox.status, None);
    let _ = update(&mut app, fixtures::inbox_refreshed(fixtures::events()));
    assert!(app.inbox.list.loaded);

    // Enter shows the event as listed, at once; refreshes read it again by its event id.
    let _ = update(&mut app, ch('j'));
    let row = app.inbox.list.selected_row().unwrap().clone();
    assert_eq!(row.event_id, "evt_orphan");
    assert_eq!(update(&mut app, key(KeyCode::Enter)), None);
    assert_eq!(app.page(), Screen::Event);
    assert_eq!(app.inbox.detail.as_ref().unwrap().row.as_ref(), Some(&row));
    match update(&mut app, ch('R')) {
        Some(Command::Refresh { inbox, event, .. }) => {
            assert_eq!(inbox.unwrap().status, None);
            assert_eq!(event.as_deref(), Some("evt_orphan"));
        }
        other => panic!("{other:?}"),
    }
    // The read gives every source's event of that id: the detail keeps its own row.
    let again = InboxEvent {
        deliveries: 4,
        ..row.clone()
    };
    let other_source = InboxEvent {
        id: 9,
        source: "ledger_event:v1".into(),
        ..row.clone()
    };
    let _ = update(
        &mut app,
        event_refreshed("evt_orphan", vec![other_source, again.clone()]),
    );
    assert_eq!(
        app.inbox.detail.as_ref().unwrap().row.as_ref(),
        Some(&again)
    );
    // It scrolls within its lines.
    let lines = app
        .inbox
        .detail
        .as_ref()
        .unwrap()
        .lines(app.now_ms, &app.session.tz)
        .len();
    let _ = update(&mut app, ch('G'));
    assert_eq!(
        usize::from(app.inbox.detail.as_ref().unwrap().scroll),
        lines - 1
    );
    let _ = update(&mut app, ch('k'));
    assert_eq!(
        usize::from(app.inbox.detail.as_ref().unwrap().scroll),
        lines - 2
    );
    // Nothing acts on the inbox: key actions say so.
    assert_eq!(update(&mut app, ch('d')), None);
    assert!(app.dialog.is_none());
    let said = &app.status.as_ref().unwrap().text();
    assert!(said.contains("the inbox is read-only"), "{said}");
    // Applied after all: it left the inbox.
    let _ = update(&mut app, event_refreshed("evt_orphan", Vec::new()));
    let detail = app.inbox.detail.as_ref().unwrap();
    assert_eq!(detail.row, None);
    assert!(
        detail.lines(app.now_ms, &app.session.tz)[0]
            .to_string()
            .contains("not in the inbox any more")
    );
    let _ = update(&mut app, key(KeyCode::Esc));
    assert!(app.inbox.detail.is_none());
    assert_eq!(app.page(), Screen::Inbox);
    match update(&mut app, ch('R')) {
        Some(Command::Refresh { event, .. }) => assert_eq!(event, None),
        other => panic!("{other:?}"),
    }
}

#[test]
fn the_outbox_view_lists_filters_and_opens_messages() {
    let mut app = fixtures::outbox_app();
    assert!(app.outbox.list.loaded);
    assert_eq!(app.outbox.list.rows.len(), 6);
    assert_eq!(app.outbox.counts, Some(fixtures::outbox_counts()));
    // Moving stays within the messages.
    let _ = update(&mut app, ch('G'));
    assert_eq!(app.outbox.list.selected, 5);
    let _ = update(&mut app, ch('j'));
    assert_eq!(app.outbox.list.selected, 5);
    let _ = update(&mut app, ch('g'));
    let _ = update(&mut app, ch('j'));
    assert_eq!(
        app.outbox.list.selected_row().unwrap().dedup_id,
        "order-8/paid"
    );
    // A refresh keeps the selected message, wherever it moved.
    let mut reordered = fixtures::messages();
    reordered.reverse();
    let _ = update(&mut app, fixtures::outbox_refreshed(reordered));
    assert_eq!(
        app.outbox.list.selected_row().unwrap().dedup_id,
        "order-8/paid"
    );
    let _ = update(&mut app, fixtures::outbox_refreshed(fixtures::messages()));

    // `s` cycles the status filter: a new listing, the old one's results dropped.
    let query = |command: Option<Command>| match command {
        Some(Command::Refresh { outbox, .. }) => outbox.unwrap().status,
        other => panic!("{other:?}"),
    };
    assert_eq!(
        query(update(&mut app, ch('s'))),
        Some(OutboxStatus::Pending)
    );
    assert!(!app.outbox.list.loaded && app.outbox.list.rows.is_empty());
    let _ = update(&mut app, fixtures::outbox_refreshed(fixtures::messages()));
    assert!(
        !app.outbox.list.loaded,
        "a listing of every status is not this one"
    );
    assert_eq!(
        query(update(&mut app, ch('s'))),
        Some(OutboxStatus::Delivered)
    );
    assert_eq!(query(update(&mut app, ch('s'))), Some(OutboxStatus::Dead));
    assert_eq!(query(update(&mut app, ch('x'))), None);
    assert_eq!(
        query(update(&mut app, ch('s'))),
        Some(OutboxStatus::Pending)
    );
    for _ in 0..3 {
        let _ = update(&mut app, ch('s'));
    }
    assert_eq!(app.outbox.status, None);
    let _ = update(&mut app, fixtures::outbox_refreshed(fixtures::messages()));

    // Enter opens a message's detail, shown at once, read with its audit.
    let row = app.outbox.list.selected_row().unwrap().clone();
    assert_eq!(
        update(&mut app, key(KeyCode::Enter)),
        Some(Command::LoadMessage { id: row.id })
    );
    let detail = app.outbox.detail.as_ref().unwrap();
    assert!(detail.loading);
    assert_eq!(detail.row.as_ref(), Some(&row));
    let _ = update(
        &mut app,
        Msg::MessageLoaded {
            id: row.id,
            result: Ok(Box::new(fixtures::message_data(&row))),
        },
    );
    let detail = app.outbox.detail.as_ref().unwrap();
    assert!(!detail.loading);
    assert_eq!(detail.audit.as_ref().unwrap().as_ref().unwrap().len(), 1);
    // Refreshes read the open message too.
    match update(&mut app, ch('R')) {
        Some(Command::Refresh { message, .. }) => assert_eq!(message, Some(row.id)),
        other => panic!("{other:?}"),
    }
    // It scrolls within its lines.
    let lines = app
        .outbox
        .detail
        .as_ref()
        .unwrap()
        .lines(app.now_ms, &app.session.tz)
        .len();
    let _ = update(&mut app, ch('G'));
    assert_eq!(
        usize::from(app.outbox.detail.as_ref().unwrap().scroll),
        lines - 1
    );
    let _ = update(&mut app, ch('k'));
    assert_eq!(
        usize::from(app.outbox.detail.as_ref().unwrap().scroll),
        lines - 2
    );
    let _ = update(&mut app, key(KeyCode::Esc));
    assert!(app.outbox.detail.is_none());
    assert_eq!(app.view, View::Outbox);
    // Key actions are the keys view's.
    assert_eq!(update(&mut app, ch('e')), None);
    assert!(app.dialog.is_none());
    assert!(app.status.as_ref().unwrap().text().contains("acts on keys"));
}

#[test]
fn a_retry_asks_for_a_reason_then_confirmation() {
    let mut app = fixtures::outbox_app();
    // The dead message.
    assert_eq!(update(&mut app, ch('r')), None);
    let dialog = app.dialog.as_ref().unwrap();
    assert_eq!(dialog.kind, ActKind::Retry);
    assert_eq!(
        dialog.target,
        Target::Message(fixtures::messages()[0].clone())
    );
    let _ = update(&mut app, key(KeyCode::Enter));
    // No reason: refused, back to the reason.
    assert_eq!(update(&mut app, ch('y')), None);
    let dialog = app.dialog.as_ref().unwrap();
    assert!(
        dialog
            .error
            .as_ref()
            .unwrap()
            .to_string()
            .contains("reason is required")
    );
    assert_eq!(dialog.focus, Field::Reason);
    typed(&mut app, " INC-51 ");
    let _ = update(&mut app, key(KeyCode::Enter));
    assert_eq!(
        update(&mut app, ch('y')),
        Some(Command::Retry {
            id: Some(1),
            reason: "INC-51".into()
        })
    );
    assert!(app.dialog.is_none());
    assert!(app.acting);

    // Done: reported, the row replaced, everything read again.
    let after = OutboxRow {
        status: OutboxStatus::Pending,
        attempts: 0,
        next_attempt_at_ms: NOW,
        ..fixtures::messages()[0].clone()
    };
    let command = update(
        &mut app,
        Msg::Retried {
            id: Some(1),
            result: Ok(Retried::One(Box::new(after.clone()))),
        },
    );
    assert!(matches!(
        command,
        Some(Command::Refresh { count: true, .. })
    ));
    assert!(!app.acting);
    assert_eq!(app.outbox.list.rows[0], after);
    let status = app.status.clone().unwrap();
    assert!(!status.is_error());
    assert_eq!(
        status.text(),
        "retry: message #1 (order-7/paid) is pending again, due now (audited)"
    );

    // Refused by the store: why, in its words.
    let _ = update(
        &mut app,
        Msg::Retried {
            id: Some(2),
            result: Err(ActError::Refused(Refusal::NotApplicable(
                NotApplicable::Due {
                    id: 2,
                    due_at_ms: NOW,
                },
            ))),
        },
    );
    let status = app.status.clone().unwrap();
    assert!(status.is_error());
    assert_eq!(
        status.text(),
        "message #2: refused: not applicable: retry: outbox message 2 is due already: the \
         next claim takes it"
    );
}

#[test]
fn retries_apply_to_dead_and_waiting_messages_only() {
    let mut app = fixtures::outbox_app();
    // Waiting for its next attempt: asks.
    let _ = update(&mut app, ch('j'));
    let _ = update(&mut app, ch('r'));
    assert!(app.dialog.is_some());
    let _ = update(&mut app, key(KeyCode::Esc));
    // In flight, due, delivered: refused at once, saying why.
    for (line, why) in [
        (2, "being delivered (in flight)"),
        (3, "due (the next claim takes it)"),
        (4, "it is delivered"),
    ] {
        app.outbox.list.selected = line;
        assert_eq!(update(&mut app, ch('r')), None);
        assert!(app.dialog.is_none(), "line {line}");
        let status = app.status.clone().unwrap();
        assert!(
            status.is_error() && status.text().contains(why),
            "{}",
            status.text()
        );
    }
    // From a message's detail: its message.
    app.outbox.list.selected = 5;
    let _ = update(&mut app, key(KeyCode::Enter));
    let _ = update(&mut app, ch('r'));
    assert_eq!(
        app.dialog.as_ref().unwrap().target,
        Target::Message(fixtures::messages()[5].clone())
    );
    let _ = update(&mut app, key(KeyCode::Esc));
    let _ = update(&mut app, key(KeyCode::Esc));

    // Every one: one dialog, one command.
    let _ = update(&mut app, ch('A'));
    let dialog = app.dialog.as_ref().unwrap();
    assert_eq!(
        (dialog.kind, &dialog.target),
        (ActKind::RetryAll, &Target::AllMessages)
    );
    typed(&mut app, "receiver fixed");
    let _ = update(&mut app, key(KeyCode::Tab));
    assert_eq!(
        update(&mut app, ch('y')),
        Some(Command::Retry {
            id: None,
            reason: "receiver fixed".into()
        })
    );
    let _ = update(
        &mut app,
        Msg::Retried {
            id: None,
            result: Ok(Retried::All(3)),
        },
    );
    assert_eq!(
        app.status.as_ref().unwrap().text(),
        "retry all: 3 messages pending again, due now (audited)"
    );

    // Read-only: no dialog.
    app.session.read_only = true;
    for c in ['r', 'A'] {
        let _ = update(&mut app, ch(c));
        assert!(app.dialog.is_none());
        assert!(app.status.as_ref().unwrap().text().contains("read-only"));
    }
}

/// The dialog warns of the store's refusals in the words the refusal will have
/// (`refusal.rs`): a live lease, a completed staged key's delete, the expiry of a key that is
/// not final.
#[test]
fn the_dialog_warns_in_the_refusals_words() {
    use crate::refusal;
    let mut running = fixtures::stuck("tenant:acme", "create_order:v1", "order-2");
    running.status = KeyStatus::Processing;
    running.locked_until_ms = Some(NOW + 30_000);
    let mut rows = rows();
    rows[3] = running;
    let mut app = loaded_app();
    let _ = update(&mut app, refreshed(rows, None));
    for _ in 0..3 {
        update(&mut app, key(KeyCode::Down));
    }
    assert_eq!(app.keys.selected_row().unwrap().key, "order-2");
    let effect = |app: &mut App, c: char| {
        assert_eq!(update(app, ch(c)), None);
        let effect = app.dialog.as_ref().unwrap().effect(&app.session.tz);
        update(app, key(KeyCode::Esc));
        effect
    };
    let live = Hazard::LeaseLive {
        locked_until_ms: Some(NOW + 30_000),
    };
    let release = effect(&mut app, 'r');
    assert_eq!(
        release.last().unwrap(),
        &refusal::warning("release", &live),
        "{release:?}"
    );
    assert!(
        release
            .last()
            .unwrap()
            .contains(&refusal::hazard_text(&live))
    );
    let expire = effect(&mut app, 'e');
    assert_eq!(
        expire,
        [refusal::not_applicable(&NotApplicable::NotFinal {
            status: KeyStatus::Processing
        })]
    );

    // A completed staged key: its delete needs force, its expiry does not.
    let mut staged = fixtures::stuck("tenant:acme", "create_order:v1", "order-2");
    staged.status = KeyStatus::Completed;
    staged.locked_until_ms = None;
    let mut rows = fixtures::rows();
    rows[3] = staged;
    let _ = update(&mut app, refreshed(rows, None));
    let effects = Hazard::EffectsExist {
        attempt: 2,
        recovery_point: Some("charge".into()),
    };
    let delete = effect(&mut app, 'd');
    assert_eq!(
        delete.last().unwrap(),
        &refusal::warning("delete", &effects)
    );
    let expire = effect(&mut app, 'e');
    assert!(
        expire.iter().all(|l| !l.contains("unless forced")),
        "{expire:?}"
    );
}
