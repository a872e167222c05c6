//! The store conformance kit ([`idem_testkit::conformance`]) on every store this crate's
//! features turn on: `postgres::<case>` (`DATABASE_URL`, or the harness's default; each case
//! in a schema `idem_test_<uuid>` of its own), `sqlite::<case>` (a new file under the system's
//! temporary directory) and `mysql::<case>` (`MYSQL_URL`, or the harness's default; a new
//! database `idem_test_<uuid>`).
#![cfg(any(feature = "postgres", feature = "sqlite", feature = "mysql"))]

use idem_testkit::conformance::cases::*;

idem_testkit::on_every_store!(
    #[flavor = current_thread]
    // Migrations.
    migrations_apply_and_record_history,
    changed_checksum_is_refused,
    unknown_migrations_are_left_alone,
    concurrent_migrations,
    // The protocol's primitives.
    lookup_absent_present_expired,
    responses_round_trip_byte_exact,
    begin_takes_a_free_key,
    begin_finds_a_committed_key_taken,
    begin_replacing_an_expired_key,
    lock_wait_times_out,
    waiter_finds_the_committed_row,
    insert_and_commit_conflict_changes_nothing,
    insert_completed_conflict_changes_nothing,
    replacing_an_expired_key,
    field_digests_round_trip,
    savepoint_rollback_undoes_the_work,
    // Staged mode.
    reserve_once,
    reserve_replacing_an_expired_key,
    lease_takeover_and_renewal,
    journal_and_finish_are_fenced,
    a_deleted_reservation_writes_nothing_into_the_next,
    release_hands_the_key_on,
    journal_commits_with_the_transaction,
    stuck_keys_of_an_operation,
    holds_end_with_their_session,
    reserve_held_takes_the_hold_with_the_key,
    // A key's life: a key that is not final never expires.
    unfinished_keys_never_expire,
    unfinished_keys_are_never_swept,
    unfinished_keys_are_never_replaced,
    finish_counts_the_ttl_from_completion,
    operator_complete_counts_the_ttl_from_now,
    // The tools' API.
    get_expire_delete,
    list_filters,
    prefixes_are_literal,
    pagination,
    limits_are_clamped,
    invalid_cursor_is_an_error,
    counts,
    sweep_deletes_only_expired,
    unreadable_rows,
    // Operator actions and the audit trail.
    stuck_keys_are_listed_and_counted,
    act_release,
    act_complete,
    act_fail,
    act_expire_and_delete,
    act_not_applicable,
    act_fenced_refusals,
    act_live_lease_needs_force,
    act_delete_completed_staged_needs_force,
    act_invalid_arguments,
    audit_filters,
    journal_for_tools,
    concurrent_acts,
    processing_table_follows_the_keys,
    // Tools on a key table sealed at rest.
    sealed_rows_without_the_keys,
    sealed_values_that_fail_their_check,
    a_changed_marker_never_makes_a_sealed_row_clear,
    complete_of_a_sealed_row_needs_the_keys,
    reseal_moves_every_row_to_the_current_key,
    reseal_moves_messages_and_events_to_the_current_key,
    // The operation registry.
    operations_registry,
    // The outbox.
    outbox_enqueue_dedups,
    outbox_rolled_back_transaction_leaves_no_message,
    outbox_claims_are_leased,
    outbox_failures_back_off_then_die,
    outbox_listing_and_counts,
    outbox_retry_is_audited,
    outbox_retry_all_in_batches,
    outbox_unreadable_payloads_die,
    outbox_concurrent_claimers_never_share_a_message,
);
