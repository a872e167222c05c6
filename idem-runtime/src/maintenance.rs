//! Keeping the key table small: the sweep of expired keys.

use std::time::Duration;

use crate::clock::millis;
use crate::protocol::Idem;
use crate::spec::{Mode, OperationSpec};
use crate::store::{Backend, Registration, StoreError};

impl<DB: Backend> Idem<DB> {
    /// Deletes keys that expired more than `grace` ago, `batch` rows per statement with
    /// `pause` between statements, until none are left. Returns how many were deleted.
    ///
    /// Each batch is one short statement (on PostgreSQL it skips rows a running request
    /// holds), so the sweep never blocks requests for long; the pause bounds how much of the
    /// database's write capacity it takes from them.
    ///
    /// A deleted key is unknown again: with
    /// [`ExpiryPolicy::Gone`](crate::spec::ExpiryPolicy::Gone) a request for it after the
    /// sweep runs anew, so choose `grace` longer than any client keeps retrying.
    ///
    /// # Errors
    /// When the store fails; rows deleted by earlier batches stay deleted.
    pub async fn sweep_expired(
        &self,
        grace: Duration,
        batch: u32,
        pause: Duration,
    ) -> Result<u64, StoreError> {
        let before = self.now_millis().saturating_sub(millis(grace));
        let batch = batch.max(1);
        let table = self.keys();
        let mut total = 0;
        loop {
            let deleted = table.sweep_batch(before, batch).await?;
            total += deleted;
            if deleted < u64::from(batch) {
                return Ok(total);
            }
            if pause.is_zero() {
                tokio::task::yield_now().await;
            } else {
                tokio::time::sleep(pause).await;
            }
        }
    }
}

impl<DB: Backend> Idem<DB> {
    /// Records how this service runs `operations` in the database's operation registry
    /// (`idempotency_operations`): their scope, ttl, mode and lease, which the operator tool
    /// `idem` shows beside their keys. Call it once at start; a later registration of the
    /// same operation id replaces the earlier one.
    ///
    /// ```no_run
    /// # async fn demo(idem: idem_runtime::Idem<idem_runtime::sqlx::Sqlite>) -> Result<(), idem_runtime::store::StoreError> {
    /// use idem_runtime::spec::OperationSpec;
    ///
    /// const CREATE_ORDER: OperationSpec = OperationSpec::new("create_order:v1");
    /// idem.register(&[&CREATE_ORDER]).await?;
    /// # Ok(()) }
    /// ```
    ///
    /// # Errors
    /// When the store fails.
    pub async fn register(&self, operations: &[&OperationSpec]) -> Result<(), StoreError> {
        let now = self.now_millis();
        let registrations: Vec<Registration> = operations
            .iter()
            .map(|spec| Registration {
                operation: spec.id.to_owned(),
                scope: spec.scope.as_str().to_owned(),
                ttl_ms: millis(spec.ttl),
                mode: spec.mode.as_str().to_owned(),
                lease_ms: matches!(spec.mode, Mode::Staged).then(|| millis(spec.lease)),
                registered_at_ms: now,
            })
            .collect();
        self.keys().register(&registrations).await
    }
}
